#include "regen/regen.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/core/buffer.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"
#include "dspark/io/gguf.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/layers.h"
#include "dspark/model/llama_family.h"
#include "dspark/model/weight_source.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `t` ([n, H] on the device, any float dtype) as raw `dtype` values on the host.
std::vector<std::byte> to_host(Context& ctx, const Tensor& t, DType dtype) {
  std::vector<std::byte> host(static_cast<size_t>(t.numel()) * dtype_size(dtype));
  Tensor dst(host.data(), dtype, t.shape(), Device::cpu());
  if (t.dtype() == dtype) {
    ctx.synchronize();
    copy_tensor(dst, t);
  } else {
    OwnedTensor tmp(dtype, t.shape(), t.device());
    convert(ctx, t, tmp);
    ctx.synchronize();
    copy_tensor(dst, tmp);
  }
  return host;
}

std::vector<float> to_host_f32(Context& ctx, const Tensor& t) {
  const std::vector<std::byte> bytes = to_host(ctx, t, DType::f32);
  std::vector<float> host(static_cast<size_t>(t.numel()));
  std::memcpy(host.data(), bytes.data(), bytes.size());
  return host;
}

// A weight of any stored format (Model::embedding_table, lm_head) as host f32 [n, k]: dense ones
// converted, block-quantized ones dequantized (core/quant.h).
std::vector<float> to_host_f32(Context& ctx, const WeightMatrix& w) {
  if (!w.quantized()) return to_host_f32(ctx, w.data);
  const std::vector<std::byte> bytes = to_host(ctx, w.data, DType::u8);
  std::vector<float> host(static_cast<size_t>(w.n * w.k));
  dequantize_blocks(w.quant, reinterpret_cast<const uint8_t*>(bytes.data()),
                    w.n * w.k / quant_block(w.quant).elements, host.data());
  return host;
}

std::string shard_name(int64_t index) {
  return fmt::format("shard_{:05d}.safetensors", index);
}

void write_json_file(const std::filesystem::path& file, const nlohmann::json& j) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp);
    DSPARK_CHECK_KIND(io, out.good(), "cannot write '{}'", tmp.string());
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  std::filesystem::rename(tmp, file);
}

// Sequences waiting to be written as one shard.
struct PendingShard {
  std::vector<const RegenSequence*> seqs;
  int64_t n_tokens = 0;
};

void write_shard(Model& model, Context& ctx, const RegenOptions& o, const PendingShard& p,
                 const std::filesystem::path& file, double& taps_s) {
  const int64_t T = p.n_tokens;
  const auto S = static_cast<int64_t>(p.seqs.size());
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> prompt_lens;
  std::vector<std::vector<int32_t>> full;
  nlohmann::json ids = nlohmann::json::array();
  tokens.reserve(static_cast<size_t>(T));
  mask.reserve(static_cast<size_t>(T));
  for (const RegenSequence* s : p.seqs) {
    std::vector<int32_t> seq = s->prompt;
    seq.insert(seq.end(), s->result.tokens.begin(), s->result.tokens.end());
    tokens.insert(tokens.end(), seq.begin(), seq.end());
    mask.insert(mask.end(), s->prompt.size(), 0);
    mask.insert(mask.end(), s->result.tokens.size(), 1);
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    prompt_lens.push_back(static_cast<int32_t>(s->prompt.size()));
    ids.push_back(s->id);
    full.push_back(std::move(seq));
  }
  DSPARK_CHECK(static_cast<int64_t>(tokens.size()) == T, "regen: shard token count");

  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("tokens", Tensor(tokens.data(), DType::i32, Shape{T}));
  tensors.emplace_back("loss_mask", Tensor(mask.data(), DType::u8, Shape{T}));
  tensors.emplace_back("seq_offsets", Tensor(offsets.data(), DType::i64, Shape{S + 1}));
  tensors.emplace_back("prompt_lens", Tensor(prompt_lens.data(), DType::i32, Shape{S}));
  TapRows rows;
  const int64_t H = model.config().hidden_size;
  if (!o.tap_layers.empty() || o.final_hidden) {
    const auto t0 = Clock::now();
    rows = compute_taps(model, ctx, full, o.tap_layers, o.final_hidden, o.tap_chunk_tokens,
                        o.hidden_dtype);
    taps_s += seconds_since(t0);
    if (!o.tap_layers.empty())
      tensors.emplace_back("taps", Tensor(rows.taps.data(), o.hidden_dtype,
                                          Shape{T, static_cast<int64_t>(o.tap_layers.size()), H}));
    if (o.final_hidden)
      tensors.emplace_back("final_hidden",
                           Tensor(rows.final_hidden.data(), o.hidden_dtype, Shape{T, H}));
  }
  const std::map<std::string, std::string> meta = {
      {"format", "dspark-regen/1"},
      {"tap_layers", nlohmann::json(o.tap_layers).dump()},
      {"hidden_size", std::to_string(H)},
      {"num_layers", std::to_string(model.config().num_layers)},
      {"vocab_size", std::to_string(model.config().vocab_size)},
      {"ids", ids.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)},
  };
  const std::filesystem::path tmp = file.string() + ".tmp";
  write_safetensors(tmp, tensors, meta);
  std::filesystem::rename(tmp, file);
}

}  // namespace

TapRows compute_taps(Model& model, Context& ctx, const std::vector<std::vector<int32_t>>& sequences,
                     const std::vector<int>& tap_layers, bool final_hidden, int chunk_tokens,
                     DType dtype) {
  DSPARK_CHECK_KIND(invalid_input, chunk_tokens > 0, "regen: tap chunk must be > 0 tokens");
  DSPARK_CHECK_KIND(invalid_input, dtype == DType::bf16 || dtype == DType::f32,
                    "regen: hidden states are stored as bf16 or f32, not {}", dtype_name(dtype));
  const int H = static_cast<int>(model.config().hidden_size);
  const int m = static_cast<int>(tap_layers.size());
  TapRows out;
  out.n_taps = m;
  out.hidden = H;
  out.dtype = dtype;
  const auto es = static_cast<int64_t>(dtype_size(dtype));
  int64_t total = 0, longest = 0;
  for (const auto& s : sequences) {
    DSPARK_CHECK_KIND(invalid_input, !s.empty(), "regen: an empty sequence has no taps");
    total += static_cast<int64_t>(s.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  }
  out.taps.resize(static_cast<size_t>(total * m * H * es));
  if (final_hidden) out.final_hidden.resize(static_cast<size_t>(total * H * es));
  if (sequences.empty()) return out;

  // Chunks of whole sequences of at most max(chunk_tokens, longest) tokens; the scratch cache
  // holds the pages of the largest chunk.
  constexpr int kPage = 16;
  const int64_t cap_tokens = std::max<int64_t>(chunk_tokens, longest);
  std::vector<size_t> chunk_end;
  int64_t max_pages = 0;
  {
    int64_t tokens = 0, pages = 0;
    for (size_t i = 0; i < sequences.size(); ++i) {
      const auto n = static_cast<int64_t>(sequences[i].size());
      if (tokens > 0 && tokens + n > cap_tokens) {
        chunk_end.push_back(i);
        tokens = pages = 0;
      }
      tokens += n;
      pages += (n + kPage - 1) / kPage;
      max_pages = std::max(max_pages, pages);
    }
    chunk_end.push_back(sequences.size());
  }
  PagedKvCache kv(model.kv_shape(kPage, static_cast<int>(max_pages)), model.device());

  int64_t row0 = 0;  // first token row of the current chunk in the output
  size_t s = 0;
  for (const size_t end : chunk_end) {
    ForwardBatch b;
    b.row_indptr.push_back(0);
    b.tap_layers = tap_layers;
    b.want_final_hidden = final_hidden;
    for (; s < end; ++s) {
      b.tokens.insert(b.tokens.end(), sequences[s].begin(), sequences[s].end());
      b.row_indptr.push_back(static_cast<int32_t>(b.tokens.size()));
      b.seqs.push_back(kv.create_sequence());
    }
    const ForwardOutput f = model.forward(ctx, kv, b);
    const auto n = static_cast<int64_t>(b.tokens.size());
    for (int j = 0; j < m; ++j) {
      const std::vector<std::byte> rows = to_host(ctx, f.taps[static_cast<size_t>(j)], dtype);
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(rows.data() + i * H * es, H * es,
                    out.taps.data() + ((row0 + i) * m + j) * H * es);
    }
    if (final_hidden) {
      const std::vector<std::byte> rows = to_host(ctx, f.final_hidden, dtype);
      std::copy(rows.begin(), rows.end(), out.final_hidden.begin() + row0 * H * es);
    }
    for (SeqId q : b.seqs) kv.release(q);
    row0 += n;
  }
  return out;
}

RegenSummary run_regen(Model& model, Context& ctx, DraftSource* source,
                       const std::vector<RegenPrompt>& prompts, const RegenOptions& o,
                       const std::filesystem::path& out_dir,
                       const std::function<std::string(const std::vector<int32_t>&)>& detokenize,
                       const std::function<void(const std::string&)>& log) {
  DSPARK_CHECK_KIND(invalid_input, o.batch > 0, "regen: --batch must be > 0");
  DSPARK_CHECK_KIND(invalid_input, o.shard_tokens > 0, "regen: --shard-tokens must be > 0");
  DSPARK_CHECK_KIND(invalid_input, source != nullptr || o.gamma == 0,
                    "regen: gamma > 0 needs a draft source");
  std::filesystem::create_directories(out_dir);
  const auto t_start = Clock::now();
  RegenSummary sum;
  sum.n_prompts = static_cast<int64_t>(prompts.size());

  int64_t longest = 1;
  for (const RegenPrompt& p : prompts) {
    DSPARK_CHECK_KIND(invalid_input, !p.tokens.empty(), "regen: prompt '{}' has no tokens", p.id);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.tokens.size()));
  }
  SpecConfig cfg;
  cfg.gamma = o.gamma;
  cfg.page_size = o.generate.page_size;
  cfg.prefill_chunk = std::max(o.generate.prefill_chunk, 8192);
  const int64_t per_row =
      longest + std::max(0, o.generate.max_tokens) + o.gamma + 1 + 2 * cfg.page_size;
  const int64_t kv_tokens =
      std::min<int64_t>(per_row * std::min<int64_t>(o.batch, sum.n_prompts + 1), 1 << 30);
  SpeculativeEngine engine(model, ctx, source, cfg, static_cast<int>(kv_tokens));

  std::vector<RegenSequence> done;  // finished sequences, in completion order
  done.reserve(prompts.size());
  std::unordered_map<RowId, size_t> row_prompt;
  std::ofstream responses(out_dir / "responses.jsonl");
  DSPARK_CHECK_KIND(io, responses.good(), "cannot write '{}'",
                    (out_dir / "responses.jsonl").string());
  nlohmann::json shards = nlohmann::json::array();
  PendingShard pending;
  auto flush_shard = [&] {
    if (pending.seqs.empty()) return;
    const std::string name = shard_name(sum.n_shards);
    write_shard(model, ctx, o, pending, out_dir / name, sum.taps_s);
    shards.push_back(
        {{"file", name}, {"sequences", pending.seqs.size()}, {"tokens", pending.n_tokens}});
    ++sum.n_shards;
    pending = PendingShard{};
  };

  size_t next = 0;
  auto t_progress = Clock::now();
  while (next < prompts.size() || engine.has_work()) {
    const bool out_of_time = o.max_seconds > 0 && seconds_since(t_start) > o.max_seconds;
    if (out_of_time && next < prompts.size() && !sum.stopped_early) {
      sum.stopped_early = true;
      log(
          fmt::format("regen: time budget of {:.0f} s reached; finishing the {} rows in flight "
                      "({} prompts not started)",
                      o.max_seconds, engine.live_rows(), prompts.size() - next));
    }
    while (!out_of_time && next < prompts.size() && engine.live_rows() < o.batch) {
      const RegenPrompt& p = prompts[next];
      if (!engine.can_admit(static_cast<int>(p.tokens.size()), o.generate.max_tokens)) break;
      RequestInput in;
      in.prompt = p.tokens;
      in.options = o.generate;
      row_prompt[engine.add(std::move(in))] = next;
      ++next;
    }
    if (!engine.has_work()) {
      if (out_of_time) break;
      DSPARK_CHECK_KIND(out_of_memory, next >= prompts.size(),
                        "regen: the KV cache cannot hold prompt '{}'", prompts[next].id);
      break;
    }
    const auto t0 = Clock::now();
    engine.step();
    sum.generate_s += seconds_since(t0);
    for (auto& [row, out] : engine.take_finished()) {
      const RegenPrompt& p = prompts[row_prompt.at(row)];
      row_prompt.erase(row);
      if (out.result.finish_reason == FinishReason::error) {
        log(fmt::format("regen: prompt '{}' failed: {}", p.id, out.result.error));
        continue;
      }
      RegenSequence seq{p.id, p.tokens, std::move(out.result), out.spec};
      sum.spec.merge(seq.spec);
      sum.n_prompt_tokens += static_cast<int64_t>(seq.prompt.size());
      sum.n_response_tokens += static_cast<int64_t>(seq.result.tokens.size());
      nlohmann::json line = {
          {"id", seq.id},
          {"n_prompt", seq.prompt.size()},
          {"n_response", seq.result.tokens.size()},
          {"finish_reason", finish_reason_name(seq.result.finish_reason)},
          {"response_tokens", seq.result.tokens},
      };
      if (source) line["spec"] = {{"rounds", seq.spec.rounds}, {"accepted", seq.spec.accepted}};
      if (detokenize) line["text"] = detokenize(seq.result.tokens);
      responses << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      done.push_back(std::move(seq));
      pending.seqs.push_back(&done.back());
      pending.n_tokens +=
          static_cast<int64_t>(done.back().prompt.size() + done.back().result.tokens.size());
      ++sum.n_sequences;
      if (pending.n_tokens >= o.shard_tokens) flush_shard();
    }
    if (o.progress_seconds > 0 && seconds_since(t_progress) >= o.progress_seconds) {
      t_progress = Clock::now();
      const double el = seconds_since(t_start);
      const double rate = sum.generate_s > 0 ? sum.n_response_tokens / sum.generate_s : 0.0;
      const double frac =
          static_cast<double>(sum.n_sequences) / std::max<int64_t>(1, sum.n_prompts);
      log(
          fmt::format("regen: {}/{} sequences, {} response tokens, {:.0f} tok/s generated, "
                      "{:.0f} s elapsed{}",
                      sum.n_sequences, sum.n_prompts, sum.n_response_tokens, rate, el,
                      frac > 0.02 ? fmt::format(", ~{:.0f} s left", el / frac - el) : ""));
    }
  }
  flush_shard();
  responses.close();
  sum.total_s = seconds_since(t_start);

  nlohmann::json meta = {
      {"format", "dspark-regen/1"},
      {"prompts", sum.n_prompts},
      {"sequences", sum.n_sequences},
      {"prompt_tokens", sum.n_prompt_tokens},
      {"response_tokens", sum.n_response_tokens},
      {"stopped_early", sum.stopped_early},
      {"tap_layers", o.tap_layers},
      {"final_hidden", o.final_hidden},
      {"hidden_dtype", std::string(dtype_name(o.hidden_dtype))},
      {"hidden_size", model.config().hidden_size},
      {"num_layers", model.config().num_layers},
      {"vocab_size", model.config().vocab_size},
      {"max_tokens", o.generate.max_tokens},
      {"temperature", o.generate.sampling.temperature},
      {"eos_token_ids", o.generate.eos_token_ids},
      {"batch", o.batch},
      {"gamma", o.gamma},
      {"device", model.device().name()},
      {"shards", shards},
      {"seconds", {{"generate", sum.generate_s}, {"taps", sum.taps_s}, {"total", sum.total_s}}},
      {"generated_tok_per_s", sum.generate_s > 0 ? sum.n_response_tokens / sum.generate_s : 0.0},
  };
  if (source) meta["spec"] = sum.spec.to_json();
  write_json_file(out_dir / "meta.json", meta);
  return sum;
}

namespace {

// The tensors of a target weights file and the host memory behind them (moving a vector or an
// OwnedTensor keeps its data where it is, so the views stay valid as the lists grow).
struct WeightFile {
  std::vector<std::vector<float>> f32;
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  bool tied = false;

  void add_f32(std::string name, std::vector<float> values, const Shape& shape) {
    f32.push_back(std::move(values));
    tensors.emplace_back(std::move(name), Tensor(f32.back().data(), DType::f32, shape));
  }
  void add(std::string name, OwnedTensor t) {
    owned.push_back(std::move(t));
    tensors.emplace_back(std::move(name), owned.back().view());
  }
};

WeightFile shared_weights(Model& model, Context& ctx) {
  const WeightMatrix embed = model.embedding_table();
  const WeightMatrix head = model.lm_head();
  const Tensor norm = model.final_norm();
  WeightFile w;
  w.tied = head.data.data() == embed.data.data();
  w.add_f32("embed_tokens", to_host_f32(ctx, embed), Shape{embed.n, embed.k});
  if (!w.tied) w.add_f32("lm_head", to_host_f32(ctx, head), Shape{head.n, head.k});
  w.add_f32("final_norm", to_host_f32(ctx, norm), norm.shape());
  return w;
}

void write_weight_file(const WeightFile& w, const std::filesystem::path& file,
                       std::map<std::string, std::string> meta) {
  meta["format"] = "dspark-target-weights/1";
  meta["tied"] = w.tied ? "true" : "false";
  const std::filesystem::path tmp = file.string() + ".tmp";
  write_safetensors(tmp, w.tensors, meta);
  std::filesystem::rename(tmp, file);
}

// The weights `model` was loaded from: a GGUF file (dequantized, Hugging Face names) or a
// safetensors checkpoint. The files are on the heap: `source` refers to them, and the struct moves.
struct OpenedWeights {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<SafeTensors> st;
  std::unique_ptr<WeightSource> source;
};

OpenedWeights open_weights(const std::filesystem::path& path, const ModelConfig& config) {
  OpenedWeights w;
  if (const std::optional<std::filesystem::path> g = resolve_gguf_model(path)) {
    w.gguf = std::make_unique<GgufFile>(GgufFile::open(*g));
    w.source = std::make_unique<GgufWeights>(*w.gguf, config);
  } else {
    w.st = std::make_unique<SafeTensors>(SafeTensors::open(path));
    w.source = std::make_unique<SafeTensorsWeights>(*w.st);
  }
  return w;
}

}  // namespace

void write_target_weights(Model& model, Context& ctx, const std::filesystem::path& file) {
  write_weight_file(shared_weights(model, ctx), file, {});
}

void write_target_model(Model& model, Context& ctx, const std::filesystem::path& model_path,
                        const std::filesystem::path& file) {
  const ModelConfig& c = model.config();
  const std::optional<LlamaFamilyTensors> family = llama_family_tensors(c);
  DSPARK_CHECK_KIND(unsupported, family.has_value(),
                    "regen: the target's weights can be written for the Llama family only, not {}",
                    c.architecture);
  DSPARK_CHECK_KIND(unsupported, c.num_experts == 0,
                    "regen: the target's weights can be written for dense models only, not the "
                    "mixture of experts {}",
                    c.architecture);
  const auto [qkv_bias, o_bias, qk_norm] = *family;
  const DType dtype = model.activation_dtype();

  WeightFile w = shared_weights(model, ctx);
  const OpenedWeights opened = open_weights(model_path, c);
  const WeightLoader loader(*opened.source, Device::cpu(), dtype);
  const int64_t h = c.hidden_size, inter = c.intermediate_size, hd = c.head_dim;
  const int64_t qw = int64_t{c.num_heads} * hd, kvw = int64_t{c.num_kv_heads} * hd;
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string a = p + "self_attn.", m = p + "mlp.";
    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"})
      w.add(p + norm, loader.load(p + norm, Shape{h}, DType::f32));
    for (const auto& [name, rows] :
         {std::pair{"q_proj", qw}, std::pair{"k_proj", kvw}, std::pair{"v_proj", kvw}}) {
      w.add(a + name + ".weight", loader.load(a + name + ".weight", Shape{rows, h}));
      if (qkv_bias)
        w.add(a + name + ".bias", loader.load(a + name + ".bias", Shape{rows}, DType::f32));
    }
    if (qk_norm) {
      for (const char* norm : {"q_norm.weight", "k_norm.weight"})
        w.add(a + norm, loader.load(a + norm, Shape{hd}, DType::f32));
    }
    w.add(a + "o_proj.weight", loader.load(a + "o_proj.weight", Shape{h, qw}));
    if (o_bias) w.add(a + "o_proj.bias", loader.load(a + "o_proj.bias", Shape{h}, DType::f32));
    w.add(m + "gate_proj.weight", loader.load(m + "gate_proj.weight", Shape{inter, h}));
    w.add(m + "up_proj.weight", loader.load(m + "up_proj.weight", Shape{inter, h}));
    w.add(m + "down_proj.weight", loader.load(m + "down_proj.weight", Shape{h, inter}));
  }
  const RopeTable table = llama_family_rope_table(c, loader);
  const auto n_freq = static_cast<int64_t>(table.inv_freq.size());
  w.add("rope_inv_freq", OwnedTensor::from_vector(table.inv_freq, Shape{n_freq}, Device::cpu()));

  std::vector<int> window = c.layer_window;
  if (window.empty()) window.assign(static_cast<size_t>(c.num_layers), 0);
  const nlohmann::json config = {
      {"architecture", c.architecture},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_layers", c.num_layers},
      {"num_heads", c.num_heads},
      {"num_kv_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"partial_rotary_factor", c.partial_rotary_factor},
      {"rope_scaling",
       {{"type", c.rope_scaling.type},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}}},
      {"tie_word_embeddings", w.tied},
      {"qkv_bias", qkv_bias},
      {"o_bias", o_bias},
      {"qk_norm", qk_norm},
      {"layer_window", window},
      {"weight_dtype", std::string(dtype_name(dtype))},
  };
  write_weight_file(w, file,
                    {{"config", config.dump()},
                     {"rope_attention_scaling", fmt::format("{:.9g}", table.attention_scaling)}});
}

}  // namespace dspark
