// bench_spec: plain vs speculative decoding on the same model and prompts, in one process.
// Prints tau, acceptance by draft position, tok/s of each, the speedup, time per phase and (on
// CUDA) achieved bandwidth against a device copy measured in the same run; a table, then JSON.
//
//   bench_spec -m MODEL [--draft none|ngram|model:DIR|DIR] [--gamma 4] [--device cpu|cuda]
//              [-n 128] [--prompts FILE[.jsonl]] [--n-prompts 8] [--chat] [--eos]
//              [--temperature 0] [--top-p 1] [--seed 0] [--spec-sampling coupled|rejection]
//              [--exact] [--json FILE]
// Greedy runs, and sampled runs with --spec-sampling coupled, must give the plain outputs
// (exit status 3 otherwise). On CUDA that holds bit for bit only with --exact (batch-invariant
// numerics): the default kernels may round a verify row differently from a decode row.
// MODEL: a checkpoint directory or a .gguf file. --chat renders each prompt as one user message
// through the model's chat template; --eos ends each generation at the model's EOS (default:
// fixed length, so that runs are comparable on random weights).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/model_chat_template.h"
#include "dspark/engine/spec_sampling.h"
#include "dspark/engine/speculative.h"
#include "dspark/engine/text_generation.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/model.h"
#include "dspark/spec/source_factory.h"

namespace dspark::bench {
namespace {

struct Args {
  std::string model;
  std::string draft = "ngram";
  std::string draft_vocab;
  bool draft_fp8 = false;
  int gamma = 4;
  int ngram_min = 1, ngram_max = 4;
  std::string device = "cpu";
  int max_tokens = 128;
  std::string prompts_file;
  int n_prompts = 8;
  int prompt_tokens = 64;  // random prompts (no tokenizer)
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::string spec_sampling = "coupled";
  std::string json_file;
  bool chat = false;
  bool eos = false;
  bool exact = false;            // CUDA: batch-invariant numerics (dspark's --exact)
  std::vector<int32_t> eos_ids;  // filled from the model when --eos
};

struct RunStats {
  int64_t tokens = 0;  // decode tokens (after the first)
  double decode_ms = 0;
  double prefill_ms = 0;
  int64_t context_sum = 0;  // sum over decode tokens of their context length
  SpecTelemetry spec;
  std::vector<std::vector<int32_t>> outputs;
  double tok_per_s() const { return decode_ms > 0 ? tokens / (decode_ms / 1e3) : 0; }
  double mean_context() const { return tokens > 0 ? double(context_sum) / tokens : 0; }
};

RunStats run(Model& target, Context& ctx, DraftSource* source,
             const std::vector<std::vector<int32_t>>& prompts, const Args& a) {
  RunStats s;
  for (const auto& p : prompts) {
    RequestInput r;
    r.prompt = p;
    r.options.max_tokens = a.max_tokens;
    r.options.sampling.temperature = a.temperature;
    r.options.sampling.top_p = a.top_p;
    r.options.sampling.spec = *spec_sampling_from_name(a.spec_sampling);
    r.options.seed = a.seed;
    r.options.eos_token_ids = a.eos_ids;  // empty: fixed length (comparable runs)
    SpecConfig cfg;
    cfg.gamma = source ? a.gamma : 0;
    auto out = generate_speculative(target, ctx, source, {std::move(r)}, cfg);
    const GenerateResult& g = out[0].result;
    s.tokens += std::max(0, g.n_generated - 1);
    s.decode_ms += g.timings.decode_ms;
    s.prefill_ms += g.timings.prefill_ms;
    for (int i = 1; i < g.n_generated; ++i) s.context_sum += static_cast<int64_t>(p.size()) + i;
    s.spec.merge(out[0].spec);
    s.outputs.push_back(g.tokens);
  }
  return s;
}

int main_impl(int argc, char** argv) {
  Args a;
  CLI::App app{"bench_spec: plain vs speculative decoding on the same model and prompts"};
  app.add_option("-m,--model", a.model, "target model directory")->required();
  app.add_option("--draft", a.draft,
                 "draft source: none | ngram | model:DIR | DIR (as dspark generate)");
  app.add_option("--draft-vocab", a.draft_vocab, "as dspark generate --draft-vocab");
  app.add_flag("--draft-fp8", a.draft_fp8, "as dspark generate --draft-fp8");
  app.add_option("--gamma", a.gamma, "drafts per round")->check(CLI::Range(0, 64));
  app.add_option("--ngram-min", a.ngram_min)->check(CLI::Range(1, 16));
  app.add_option("--ngram-max", a.ngram_max)->check(CLI::Range(1, 16));
  app.add_option("--device", a.device, "cpu | cuda | cuda:N");
  app.add_option("-n,--max-tokens", a.max_tokens, "tokens generated per prompt")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--prompts", a.prompts_file, "text prompts, one per line");
  app.add_option("--n-prompts", a.n_prompts, "prompts used")->check(CLI::Range(1, 100000));
  app.add_option("--prompt-tokens", a.prompt_tokens, "length of random prompts (no tokenizer)");
  app.add_option("--temperature", a.temperature)->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-p", a.top_p)->check(CLI::Range(1e-6f, 1.0f));
  app.add_option("--seed", a.seed);
  app.add_option("--spec-sampling", a.spec_sampling,
                 "coupled | rejection (as dspark generate --spec-sampling)")
      ->check(CLI::IsMember({"coupled", "rejection"}));
  app.add_option("--json", a.json_file, "also write the JSON result to this file");
  app.add_flag("--chat", a.chat, "render prompts as a user message through the chat template");
  app.add_flag("--eos", a.eos, "stop at the model's EOS (default: fixed length)");
  app.add_flag("--exact", a.exact,
               "CUDA: batch-invariant numerics (dspark --exact), so that speculative output "
               "equals plain output bit for bit");
  CLI11_PARSE(app, argc, argv);

  const Device device = parse_device(a.device);
  Context ctx(device);
  ctx.cuda_tuning().batch_invariant = a.exact;
  const DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  Roofline roof;
  if (device.is_cuda()) roof.copy_bandwidth = cuda::measure_copy_bandwidth(device.index);
  const int64_t before = memory_stats(device).active_bytes;
  const bool has_tokenizer =
      std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json") ||
      resolve_gguf_model(a.model).has_value();
  std::optional<TextModel> tm;
  std::unique_ptr<Model> bare;
  if (has_tokenizer) {
    tm = load_text_model(a.model, device, dtype);
  } else {
    bare = load_model(a.model, device, dtype);
  }
  Model* target = tm ? tm->model.get() : bare.get();
  roof.weight_bytes = static_cast<double>(memory_stats(device).active_bytes - before);
  roof.kv_bytes_per_token = kv_bytes_per_token(target->config(), dtype);
  if (a.eos) {
    DSPARK_CHECK_KIND(invalid_input, tm.has_value(), "--eos needs a model with a tokenizer");
    a.eos_ids = tm->eos_token_ids;
  }

  std::vector<std::vector<int32_t>> prompts;
  if (tm) {
    const auto texts =
        a.prompts_file.empty() ? builtin_prompts() : read_prompt_file(a.prompts_file);
    const ChatTemplate tmpl = a.chat ? load_model_chat_template(a.model) : ChatTemplate();
    DSPARK_CHECK_KIND(invalid_input, !a.chat || tmpl.has_template(),
                      "--chat: the model has no chat template");
    // An explicit --n-prompts beyond the texts at hand is refused rather than silently cut.
    DSPARK_CHECK_KIND(
        invalid_input,
        app.count("--n-prompts") == 0 || a.n_prompts <= static_cast<int>(texts.size()),
        "--n-prompts {}: only {} prompts in {}", a.n_prompts, texts.size(),
        a.prompts_file.empty() ? std::string("the built-in set (give --prompts FILE)")
                               : a.prompts_file);
    for (int i = 0; i < a.n_prompts && i < static_cast<int>(texts.size()); ++i) {
      const std::string& text = texts[static_cast<size_t>(i)];
      if (a.chat) {
        const nlohmann::json messages = {{{"role", "user"}, {"content", text}}};
        prompts.push_back(tm->tokenizer.encode(tmpl.render(messages, true), false));
      } else {
        prompts.push_back(tm->tokenizer.encode(text, true));
      }
    }
  } else {
    DSPARK_CHECK_KIND(invalid_input, !a.chat && a.prompts_file.empty(),
                      "--chat / --prompts need a model with a tokenizer");
    prompts = random_token_prompts(a.n_prompts, a.prompt_tokens, target->config().vocab_size, 7);
  }

  DraftOptions draft_options;
  draft_options.draft = a.draft;
  draft_options.draft_vocab = a.draft_vocab;
  draft_options.draft_fp8 = a.draft_fp8;
  draft_options.ngram = NgramConfig{a.ngram_min, a.ngram_max};
  draft_options.draft_model_kv_tokens = a.max_tokens * 2 + 4096;
  CreatedSource created = create_draft_source(draft_options, *target);
  std::unique_ptr<DraftSource> source = std::move(created.source);

  // Warm-up (kernel selection, allocations), then the measured runs.
  {
    Args w = a;
    w.max_tokens = 8;
    run(*target, ctx, nullptr, {prompts[0]}, w);
    if (source) run(*target, ctx, source.get(), {prompts[0]}, w);
  }
  const RunStats plain = run(*target, ctx, nullptr, prompts, a);
  std::optional<RunStats> spec;
  if (source) spec = run(*target, ctx, source.get(), prompts, a);

  // Greedy, and coupled sampling with the same seed, must reproduce the plain outputs.
  const SpecSampling mode = *spec_sampling_from_name(a.spec_sampling);
  int mismatches = 0;
  if (spec && (a.temperature == 0 || mode == SpecSampling::coupled))
    for (size_t i = 0; i < prompts.size(); ++i) mismatches += plain.outputs[i] != spec->outputs[i];

  const double step_bytes = roof.bytes_per_step(plain.mean_context());
  const double plain_gbs = step_bytes * plain.tok_per_s() / 1e9;
  nlohmann::json j = {
      {"model", a.model},
      {"device", device.name()},
      {"device_name", device.is_cuda() ? cuda::device_name(device.index) : "cpu"},
      {"dtype", dtype_name(dtype)},
      {"exact", a.exact},
      {"draft", a.draft},
      {"gamma", a.gamma},
      {"prompts", prompts.size()},
      {"max_tokens", a.max_tokens},
      {"temperature", a.temperature},
      {"top_p", a.top_p},
      {"seed", a.seed},
      {"spec_sampling", a.spec_sampling},
      {"chat", a.chat},
      {"stop_at_eos", a.eos},
      {"weight_bytes", roof.weight_bytes},
      {"kv_bytes_per_token", roof.kv_bytes_per_token},
      {"copy_bandwidth_gbs", roof.copy_bandwidth / 1e9},
      {"plain",
       {{"tok_per_s", plain.tok_per_s()},
        {"decode_ms", plain.decode_ms},
        {"tokens", plain.tokens},
        {"achieved_gbs", plain_gbs},
        {"fraction_of_copy_bandwidth",
         roof.copy_bandwidth > 0 ? plain_gbs * 1e9 / roof.copy_bandwidth : 0.0}}},
  };
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"plain", fmt::format("{:.1f}", plain.tok_per_s()), "1.00", "-",
                  fmt::format("{:.1f}", plain_gbs), "-"});
  if (spec) {
    const double speedup = plain.tok_per_s() > 0 ? spec->tok_per_s() / plain.tok_per_s() : 0;
    j["speculative"] = {{"tok_per_s", spec->tok_per_s()}, {"decode_ms", spec->decode_ms},
                        {"tokens", spec->tokens},         {"speedup", speedup},
                        {"mismatches", mismatches},       {"spec", spec->spec.to_json()}};
    std::string acc;
    for (size_t p = 0; p < spec->spec.drafted_at.size(); ++p)
      acc += fmt::format("{}{:.2f}", p ? " " : "",
                         spec->spec.drafted_at[p]
                             ? double(spec->spec.accepted_at[p]) / spec->spec.drafted_at[p]
                             : 0.0);
    rows.push_back({a.draft, fmt::format("{:.1f}", spec->tok_per_s()),
                    fmt::format("{:.2f}", speedup), fmt::format("{:.2f}", spec->spec.tau()), "-",
                    acc});
  }
  std::printf(
      "%s",
      format_table({"run", "tok/s", "speedup", "tau", "GB/s", "accept by position"}, rows).c_str());
  if (roof.copy_bandwidth > 0)
    std::printf(
        "copy bandwidth %.0f GB/s; plain decode moves %.0f GB/s (%.0f%%); weights %.2f GB\n",
        roof.copy_bandwidth / 1e9, plain_gbs, 100 * plain_gbs * 1e9 / roof.copy_bandwidth,
        roof.weight_bytes / 1e9);
  if (spec)
    std::printf(
        "phases (ms, all prompts): draft %.1f  verify %.1f  rest %.1f; mismatches with plain %d\n",
        spec->spec.draft_ms, spec->spec.verify_ms, spec->spec.rest_ms, mismatches);
  const std::string dump = j.dump();
  std::printf("%s\n", dump.c_str());
  if (!a.json_file.empty()) std::ofstream(a.json_file) << j.dump(2) << "\n";
  return mismatches == 0 ? 0 : 3;
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  try {
    return dspark::bench::main_impl(argc, argv);
  } catch (const dspark::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
