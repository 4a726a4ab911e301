// dspark generate: load a model directory, generate from a prompt, stream the text to stdout;
// --json adds one JSON object (the last line) with the text, tokens and timings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "cost_cache_options.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/engine/json_output.h"
#include "dspark/engine/spec_sampling.h"
#include "dspark/engine/text_generation.h"
#include "dspark/model/registry.h"
#include "dspark/spec/source_factory.h"

namespace dspark::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  int max_tokens = 128;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  PenaltyParams penalties;
  int logprobs = -1;
  uint64_t seed = 0;
  std::string spec_sampling = "coupled";
  std::string device = "cpu";
  std::vector<std::string> stop;
  bool json = false;
  std::string json_schema;   // structured output: a JSON-Schema file
  bool json_object = false;  // structured output: any JSON object
  bool cuda_graphs = true;   // CUDA: replay captured decode / verify forwards
  bool exact = false;        // CUDA: batch-invariant numerics (--exact)
  // Speculative decoding.
  std::string draft = "none";
  std::string draft_vocab;
  bool draft_fp8 = false;
  std::optional<int> gamma;
  std::string draft_policy = "adaptive";
  CostCacheArgs cost_cache;
  int ngram_min = 1, ngram_max = 4;
};

int run_generate(const GenerateArgs& a) {
  const Device device = parse_device(a.device);
  Context ctx(device);  // "built without CUDA" / "no CUDA device" before anything is loaded
  ctx.cuda_tuning().batch_invariant = a.exact;
  TextModel tm = load_text_model(a.model_dir, device, default_engine_dtype(device));
  if (device.is_cuda()) tm.model->set_cuda_graphs(a.cuda_graphs);

  GenerateOptions o;
  o.sampling = default_sampling(tm.defaults);
  if (a.temperature) o.sampling.temperature = *a.temperature;
  if (a.top_k) o.sampling.top_k = *a.top_k;
  if (a.top_p) o.sampling.top_p = *a.top_p;
  if (a.min_p) o.sampling.min_p = *a.min_p;
  o.sampling.spec = *spec_sampling_from_name(a.spec_sampling);
  o.penalties = a.penalties;
  o.logprobs = a.logprobs;
  o.seed = a.seed;
  o.max_tokens = a.max_tokens;
  o.stop = a.stop;
  if (!a.json_schema.empty() || a.json_object) {
    JsonSchema schema = a.json_object ? JsonSchema::any_object() : load_json_schema(a.json_schema);
    o.eos_token_ids = tm.eos_token_ids;
    o.json = make_json_constraint(std::move(schema), tm.tokenizer, tm.eos_token_ids);
  }

  DraftOptions draft_options;
  draft_options.draft = a.draft;
  draft_options.draft_vocab = a.draft_vocab;
  draft_options.draft_fp8 = a.draft_fp8;
  draft_options.ngram = NgramConfig{a.ngram_min, a.ngram_max};
  draft_options.draft_model_kv_tokens = std::max(4096, 2 * a.max_tokens + 4096);
  CreatedSource created = create_draft_source(draft_options, *tm.model);
  SpecConfig spec_config;
  spec_config.gamma = a.gamma ? *a.gamma : created.default_gamma;
  spec_config.draft_policy = parse_draft_policy(a.draft_policy);
  spec_config.cost_cache = cost_cache_config(a.cost_cache, a.model_dir, device);
  spec_config.log = [](std::string_view line) {
    std::fprintf(stderr, "dspark generate: %.*s\n", static_cast<int>(line.size()), line.data());
  };

  bool ends_with_newline = false;  // the text always ends with a newline, even when empty
  auto on_text = [&](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    ends_with_newline = piece.back() == '\n';
  };
  std::optional<SpecTelemetry> spec;
  GenerateResult r;
  // Structured output runs in the speculative engine, with or without a draft source.
  if (created.source || o.json) {
    RequestOutput out =
        generate_text_speculative(tm, ctx, a.prompt, o, created.source.get(), spec_config, on_text);
    r = std::move(out.result);
    spec = out.spec;
  } else {
    r = generate_text(tm, ctx, a.prompt, o, on_text);
  }
  if (!ends_with_newline) std::fputc('\n', stdout);

  if (a.json) {
    const GenerateTimings& t = r.timings;
    nlohmann::json j = {
        {"text", r.text},
        {"tokens", r.tokens},
        {"n_prompt", r.n_prompt},
        {"n_generated", r.n_generated},
        {"finish_reason", finish_reason_name(r.finish_reason)},
        {"tok_per_s", t.decode_tok_per_s},
        {"prefill_tok_per_s", t.prefill_tok_per_s},
        {"timings_ms", {{"prefill", t.prefill_ms}, {"decode", t.decode_ms}, {"total", t.total_ms}}},
        {"device", device.name()},
        {"sampling",
         {{"temperature", o.sampling.temperature},
          {"top_k", o.sampling.top_k},
          {"top_p", o.sampling.top_p},
          {"min_p", o.sampling.min_p},
          {"seed", o.seed}}},
    };
    if (r.finish_reason == FinishReason::stop) j["stop"] = r.stop_matched;
    if (o.logprobs >= 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const TokenLogprobs& e : r.logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const TokenLogprob& alt : e.top) top.push_back({alt.token, alt.logprob});
        lp.push_back({{"token", e.token}, {"logprob", e.logprob}, {"top", std::move(top)}});
      }
      j["logprobs"] = std::move(lp);
    }
    if (spec) {
      j["spec"] = spec->to_json();
      j["spec"]["draft"] = created.kind;
      j["spec"]["gamma"] = spec_config.gamma;
      j["spec"]["sampling"] = spec_sampling_name(o.sampling.spec);
    }
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fprintf(stdout, "%s\n", line.c_str());
  }
  std::fflush(stdout);
  return 0;
}

// A numeric range check with a readable message ("must be >= 0", "must be in (0, 1]").
CLI::Validator number_in(double lo, double hi, bool lo_open, const std::string& text) {
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(value, &used);
          if (used != value.size()) return "'" + value + "' is not a number";
        } catch (const std::exception&) {
          return "'" + value + "' is not a number";
        }
        if (std::isnan(v) || v < lo || (lo_open && v == lo) || v > hi) {
          return "must be " + text + " (got " + value + ")";
        }
        return {};
      },
      text);
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* sub =
      app.add_subcommand("generate", "Generate text from a prompt (plain or speculative decoding)");
  sub->add_option("-m,--model", args->model_dir,
                  "Model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  sub->add_option("-p,--prompt", args->prompt, "Prompt text")->required();
  sub->add_option("-n,--max-tokens", args->max_tokens, "Tokens to generate at most")
      ->check(number_in(0, 1e9, false, ">= 0"))
      ->capture_default_str();
  sub->add_option("--temperature", args->temperature,
                  "Sampling temperature, >= 0 (0 = greedy; default: generation_config.json, else "
                  "greedy)")
      ->check(number_in(0, 1e30, false, ">= 0"));
  sub->add_option("--top-k", args->top_k, "Keep the k most probable tokens (0 = off)")
      ->check(number_in(0, 1e9, false, ">= 0"));
  sub->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1] (1 = off)")
      ->check(number_in(0, 1, true, "in (0, 1]"));
  sub->add_option("--min-p", args->min_p,
                  "Keep tokens with p >= min_p * p_max, in [0, 1] (0 = off)")
      ->check(number_in(0, 1, false, "in [0, 1]"));
  sub->add_option("--presence-penalty", args->penalties.presence,
                  "Subtracted from the logit of every token generated so far, in [-2, 2]")
      ->check(number_in(-2, 2, false, "in [-2, 2]"))
      ->capture_default_str();
  sub->add_option("--frequency-penalty", args->penalties.frequency,
                  "Times each token's count in the generated text, subtracted from its logit, "
                  "in [-2, 2]")
      ->check(number_in(-2, 2, false, "in [-2, 2]"))
      ->capture_default_str();
  sub->add_option("--repetition-penalty", args->penalties.repetition,
                  "Divides positive (multiplies negative) logits of prompt and generated tokens, "
                  "> 0 (1 = off)")
      ->check(number_in(0, 1e6, true, "> 0"))
      ->capture_default_str();
  sub->add_option("--logprobs", args->logprobs,
                  "With --json: each generated token's log-probability and this many most "
                  "probable alternatives, in [0, 20] (docs/server.md)")
      ->check(number_in(0, kMaxTopLogprobs, false, "in [0, 20]"));
  sub->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  add_spec_sampling_option(sub, args->spec_sampling);
  sub->add_option("--stop", args->stop, "Stop string (repeatable); not included in the output")
      ->allow_extra_args(false);
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object with text, tokens and timings last");
  auto* schema_opt =
      sub->add_option("--json-schema", args->json_schema,
                      "Structured output: the text is a JSON document valid under the JSON-Schema "
                      "in this file (the subset of docs/server.md), compact, ending at EOS")
          ->check(CLI::ExistingFile);
  sub->add_flag("--json-object", args->json_object,
                "Structured output: the text is a JSON object (any keys and values)")
      ->excludes(schema_opt);
  sub->add_flag("!--no-cuda-graphs", args->cuda_graphs,
                "CUDA: run every forward eagerly instead of replaying captured CUDA graphs");
  add_exact_option(sub, args->exact);
  sub->add_option(
         "--draft", args->draft,
         "Speculative decoding: none, ngram (prompt lookup), mtp (the target's own "
         "next-token prediction layer: DeepSeek-V3, GLM-4.5, GLM-5), model:DIR (a draft model "
         "sharing the tokenizer) or DIR (a DFlash/DSpark drafter, or a draft model)")
      ->capture_default_str();
  sub->add_option("--draft-vocab", args->draft_vocab,
                  "A DSpark/DFlash drafter drafts greedy rounds over only these token ids (a JSON "
                  "list, e.g. from tools/train/make_draft_vocab.py)");
  sub->add_flag(
      "--draft-fp8", args->draft_fp8,
      "A DSpark/DFlash drafter's projections and LM head in FP8 (E4M3, per-row scales; CUDA, "
      "bf16): about half the bytes per draft step, same output (the target verifies)");
  sub->add_option("--gamma", args->gamma,
                  "Drafted tokens per round at most (default: the drafter's block, else 4)")
      ->check(number_in(0, 64, false, "in [0, 64]"));
  add_draft_policy_option(sub, args->draft_policy);
  add_cost_cache_options(sub, args->cost_cache);
  sub->add_option("--ngram-min", args->ngram_min, "Prompt lookup: shortest n-gram matched")
      ->check(number_in(1, 64, false, "in [1, 64]"))
      ->capture_default_str();
  sub->add_option("--ngram-max", args->ngram_max, "Prompt lookup: longest n-gram matched")
      ->check(number_in(1, 64, false, "in [1, 64]"))
      ->capture_default_str();
  return [args] { return run_generate(*args); };
}

}  // namespace dspark::cli
