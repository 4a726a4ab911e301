// dspark eval: greedy speculative vs plain decoding over a prompt set with categories (JSONL,
// engine/eval_set.h), prompt by prompt; prints a table per category and overall, then the
// summary as one JSON line; --json FILE also keeps every turn's figures. Exit status 1 when an
// output differs from plain decoding in f32 (a bug: greedy speculative decoding is lossless).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "cost_cache_options.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/engine/eval_set.h"
#include "dspark/engine/model_chat_template.h"
#include "dspark/model/registry.h"
#include "dspark/spec/source_factory.h"

namespace dspark::cli {
namespace {

struct EvalArgs {
  std::string model;
  std::string draft;
  std::string draft_vocab;
  bool draft_fp8 = false;
  bool no_markov = false;
  bool no_thresholds = false;
  std::string prompts;
  std::optional<int> gamma;
  int max_tokens = 128;
  int limit = 0;
  int batch = 1;
  std::string device = "cpu";
  std::string json_file;
  bool quiet = false;
  // fixed by default: tau and acceptance by position then measure the drafter at gamma.
  std::string draft_policy = "fixed";
  CostCacheArgs cost_cache;
  bool exact = false;  // CUDA: batch-invariant numerics (--exact)
};

nlohmann::json turn_json(const EvalTurn& t) {
  return {{"id", t.id},
          {"category", t.category},
          {"turn", t.turn},
          {"n_prompt", t.n_prompt},
          {"n_generated", t.n_generated},
          {"identical", t.identical},
          {"output_hash", fmt::format("{:016x}", t.output_hash)},
          {"tau", t.spec.tau()},
          {"accepted_by_position", t.spec.accepted_at},
          {"drafted_by_position", t.spec.drafted_at},
          {"plain_decode_ms", t.plain_decode_ms},
          {"spec_decode_ms", t.spec_decode_ms},
          {"speedup", t.speedup()}};
}

int run_eval_command(const EvalArgs& a) {
  const std::vector<EvalItem> items = read_eval_set(a.prompts);
  const Device device = parse_device(a.device);
  Context ctx(device);
  ctx.cuda_tuning().batch_invariant = a.exact;
  TextModel tm = load_text_model(a.model, device, default_engine_dtype(device));
  const ChatTemplate chat = load_model_chat_template(a.model);

  EvalOptions options;
  options.max_tokens = a.max_tokens;
  options.limit = a.limit;
  options.batch = a.batch;
  DraftOptions draft_options;
  draft_options.draft = a.draft;
  draft_options.draft_vocab = a.draft_vocab;
  draft_options.draft_fp8 = a.draft_fp8;
  draft_options.markov = !a.no_markov;
  draft_options.thresholds = !a.no_thresholds;
  options.spec.gamma = a.gamma.value_or(64);  // the largest allowed, until the drafter's is known
  draft_options.draft_model_kv_tokens = std::max(4096, eval_kv_tokens(tm, items, options));
  CreatedSource created = create_draft_source(draft_options, *tm.model);
  DSPARK_CHECK_KIND(invalid_input, created.source != nullptr,
                    "--draft none: eval compares a draft source with plain decoding");
  options.spec.gamma = a.gamma ? *a.gamma : created.default_gamma;
  options.spec.draft_policy = parse_draft_policy(a.draft_policy);
  options.spec.cost_cache = cost_cache_config(a.cost_cache, a.model, device);

  const size_t n_items =
      a.limit > 0 ? std::min(items.size(), static_cast<size_t>(a.limit)) : items.size();
  std::fprintf(stderr,
               "dspark eval: %zu prompts from %s, draft %s (gamma %d, %s%s%s), %d tokens, batch "
               "%d, %s\n",
               n_items, a.prompts.c_str(), created.kind.c_str(), options.spec.gamma,
               a.draft_policy.c_str(), a.no_markov ? ", Markov head off" : "",
               a.no_thresholds ? ", no pruning" : "", a.max_tokens, a.batch, device.name().c_str());
  int done = 0;
  const std::vector<EvalTurn> turns =
      run_eval(tm, ctx, chat, items, *created.source, options, [&](const EvalTurn& t) {
        done += t.turn == 0;
        if (!a.quiet)
          std::fprintf(stderr, "[%d/%zu] %s turn %d (%s): %d tokens, tau %.2f, %.2fx%s\n", done,
                       n_items, t.id.c_str(), t.turn + 1, t.category.c_str(), t.n_generated,
                       t.spec.tau(), t.speedup(), t.identical ? "" : ", OUTPUT DIFFERS");
      });

  const EvalSummary summary = summarize_eval(turns);
  nlohmann::json j = {{"model", a.model},
                      {"prompts_file", a.prompts},
                      {"device", device.name()},
                      {"dtype", dtype_name(tm.model->activation_dtype())},
                      {"draft", a.draft},
                      {"draft_kind", created.kind},
                      {"draft_vocab", a.draft_vocab},
                      {"markov", !a.no_markov},
                      {"thresholds", !a.no_thresholds},
                      {"gamma", options.spec.gamma},
                      {"draft_policy", a.draft_policy},
                      {"max_tokens", a.max_tokens},
                      {"batch", a.batch},
                      {"greedy", true}};
  j.update(eval_summary_json(summary));
  std::printf("%s", format_eval_table(summary).c_str());
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  if (!a.json_file.empty()) {
    nlohmann::json full = j;
    full["turns"] = nlohmann::json::array();
    for (const EvalTurn& t : turns) full["turns"].push_back(turn_json(t));
    std::ofstream f(a.json_file);
    DSPARK_CHECK_KIND(io, f.good(), "--json: cannot write {}", a.json_file);
    f << full.dump(1) << "\n";
  }
  const bool f32 = tm.model->activation_dtype() == DType::f32;
  if (summary.overall.identical != summary.overall.turns) {
    std::fprintf(stderr, "dspark eval: %d of %d outputs differ from plain decoding%s\n",
                 summary.overall.turns - summary.overall.identical, summary.overall.turns,
                 f32 ? "" : " (bf16: a near-tie can round differently in a verify forward)");
    if (f32) return 1;
  }
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Greedy speculative vs plain decoding over a prompt set with categories: tau, acceptance "
      "by draft position, speedup and identical outputs per category (table + JSON)");
  sub->add_option("-m,--model", args->model, "Model: a directory or a .gguf file")->required();
  sub->add_option("--draft", args->draft,
                  "Draft source: ngram, mtp (the target's MTP layer), model:DIR or DIR (a "
                  "DFlash/DSpark drafter)")
      ->required();
  sub->add_option("--draft-vocab", args->draft_vocab,
                  "A DSpark/DFlash drafter drafts greedy rounds over only these token ids");
  sub->add_flag("--draft-fp8", args->draft_fp8,
                "A DSpark/DFlash drafter's projections and LM head in FP8 (CUDA)");
  sub->add_flag("--no-markov", args->no_markov,
                "Ablation: a DSpark drafter drafts from its backbone alone, without its Markov "
                "head (the checkpoint as plain DFlash)");
  sub->add_flag("--no-thresholds", args->no_thresholds,
                "Ablation: a DSpark/DFlash drafter ignores dspark_thresholds.json (no confidence "
                "pruning, no acceptance curves)");
  sub->add_option("--prompts", args->prompts,
                  "Prompt set: JSONL of {id, category, source, prompt | turns, raw}")
      ->required();
  sub->add_option("--gamma", args->gamma,
                  "Drafted tokens per round at most (default: the drafter's block, else 4)")
      ->check(CLI::Range(1, 64));
  sub->add_option("-n,--max-tokens", args->max_tokens, "Tokens per turn at most (EOS ends it)")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  sub->add_option("--limit", args->limit, "Only the first N items (0: all)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  sub->add_option("--batch", args->batch,
                  "Items decoded together: tau, acceptance and outputs as at 1 (f32), speedups "
                  "those of the batch")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--json", args->json_file,
                  "Also write the result with every turn's figures to this file (the input of "
                  "tools/eval/plot_acceptance.py)");
  sub->add_flag("-q,--quiet", args->quiet, "No progress line per turn on stderr");
  add_exact_option(sub, args->exact);
  add_draft_policy_option(sub, args->draft_policy)
      ->description(
          "Draft length per row and round: fixed (the default here: tau and acceptance by "
          "position measure the drafter at --gamma) or adaptive (as generate and serve use by "
          "default: from the verify cost and each row's recent acceptance; the speedups are then "
          "what a user sees)");
  add_cost_cache_options(sub, args->cost_cache);
  return [args] { return run_eval_command(*args); };
}

}  // namespace dspark::cli
