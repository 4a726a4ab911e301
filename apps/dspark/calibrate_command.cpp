// dspark calibrate: fit per-position confidence thresholds for a DSpark drafter. Runs the
// drafter unpruned with the target over a prompt set (all prompts batched, greedy), logs every
// reached draft position as (position, confidence, accepted), fits the thresholds and each
// position's acceptance by confidence (spec/dspark/calibration.h) and writes them next to the
// checkpoint as dspark_thresholds.json, which later loads of the drafter pick up.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/engine/speculative.h"
#include "dspark/engine/text_generation.h"
#include "dspark/model/registry.h"
#include "dspark/spec/dspark/calibration.h"
#include "dspark/spec/dspark/dspark_source.h"

namespace dspark::cli {
namespace {

struct CalibrateArgs {
  std::string model_dir;
  std::string draft_dir;
  std::string prompts_file;
  std::string output;
  int max_tokens = 128;
  int block_size = 0;
  double target_precision = 0.5;
  int64_t min_samples = 64;
  int64_t min_kept = 16;
  std::string device = "cpu";
  bool json = false;
};

// Generic prompts used when no --prompts file is given (a mix of chat, code and math).
const std::vector<std::string> kDefaultPrompts = {
    "Explain why the sky is blue in a few sentences.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "What is 17 multiplied by 23? Show your reasoning step by step.",
    "Summarise the plot of Romeo and Juliet.",
    "List five tips for writing clear technical documentation.",
    "Translate 'good morning, how are you?' into French and Spanish.",
    "Write a short poem about the ocean.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
};

// One prompt per line; a line holding a JSON object takes its "prompt" or "text" field, a JSON
// string its value. Empty lines are skipped.
std::vector<std::string> read_prompts(const std::string& file) {
  std::ifstream in(file);
  DSPARK_CHECK_KIND(invalid_input, in.good(), "--prompts: cannot read '{}'", file);
  std::vector<std::string> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line.front() == '{' || line.front() == '"') {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_string()) {
        out.push_back(j.get<std::string>());
        continue;
      }
      if (j.is_object()) {
        const auto it = j.contains("prompt") ? j.find("prompt") : j.find("text");
        DSPARK_CHECK_KIND(
            invalid_input, it != j.end() && it->is_string(),
            "--prompts: {} line {}: a JSON line needs a \"prompt\" or \"text\" string", file,
            line_no);
        out.push_back(it->get<std::string>());
        continue;
      }
    }
    out.push_back(line);
  }
  DSPARK_CHECK_KIND(invalid_input, !out.empty(), "--prompts: '{}' holds no prompts", file);
  return out;
}

int run_calibrate(const CalibrateArgs& a) {
  const Device device = parse_device(a.device);
  Context ctx(device);
  TextModel tm = load_text_model(a.model_dir, device, default_engine_dtype(device));
  DSPARK_CHECK_KIND(invalid_input, is_block_drafter_dir(a.draft_dir),
                    "--draft: '{}' is not a DSpark/DFlash drafter directory (config.json with "
                    "Qwen3DSparkModel, DSparkDraftModel or DFlashDraftModel)",
                    a.draft_dir);
  const std::vector<std::string> prompts =
      a.prompts_file.empty() ? kDefaultPrompts : read_prompts(a.prompts_file);

  std::vector<RequestInput> requests;
  int64_t kv_tokens = 0;
  for (const std::string& p : prompts) {
    RequestInput r;
    r.prompt = tm.tokenizer.encode(p, /*add_special_tokens=*/true);
    DSPARK_CHECK_KIND(invalid_input, !r.prompt.empty(), "a prompt encodes to no tokens");
    r.options.max_tokens = a.max_tokens;
    r.options.eos_token_ids = tm.eos_token_ids;
    kv_tokens += static_cast<int64_t>(r.prompt.size()) + a.max_tokens + 256;
    requests.push_back(std::move(r));
  }
  DSPARK_CHECK_KIND(invalid_input, kv_tokens < (int64_t{1} << 30), "prompt set too large");

  DSparkSourceOptions opt;
  opt.block_size = a.block_size;
  opt.kv_tokens = static_cast<int>(kv_tokens);
  // Unpruned: the thresholds are what we are about to fit.
  auto source = load_dspark_source(a.draft_dir, *tm.model, opt, /*read_thresholds_file=*/false);
  DSPARK_CHECK_KIND(invalid_input, source->config().confidence_head,
                    "--draft: '{}' has no confidence head (enable_confidence_head is false); "
                    "there is nothing to calibrate",
                    a.draft_dir);
  std::vector<ConfidenceSample> log;
  source->set_confidence_log(&log);
  SpecConfig cfg;
  cfg.gamma = source->max_drafts();
  const auto outputs = generate_speculative(*tm.model, ctx, source.get(), std::move(requests), cfg);
  SpecTelemetry total;
  for (const auto& o : outputs) total.merge(o.spec);

  ThresholdFitOptions fo;
  fo.target_precision = a.target_precision;
  fo.min_samples = a.min_samples;
  fo.min_kept = a.min_kept;
  const ThresholdFit fit = fit_thresholds(log, source->max_drafts(), fo);
  ThresholdsFile file;
  file.thresholds = fit.thresholds;
  file.target_precision = a.target_precision;
  file.block_size = source->block_rows();
  file.n_samples = static_cast<int64_t>(log.size());
  file.positions = fit.positions;
  AcceptanceFitOptions ao;
  ao.min_samples = a.min_samples;
  file.acceptance = fit_acceptance_curves(log, source->max_drafts(), ao);
  const std::filesystem::path out = a.output.empty()
                                        ? std::filesystem::path(a.draft_dir) / kThresholdsFileName
                                        : std::filesystem::path(a.output);
  write_thresholds_file(out, file);

  std::printf("calibrated %s on %zu prompts: %lld rounds, %lld drafted, %lld accepted, tau %.2f\n",
              a.draft_dir.c_str(), prompts.size(), static_cast<long long>(total.rounds),
              static_cast<long long>(total.drafted), static_cast<long long>(total.accepted),
              total.tau());
  std::printf("%8s %9s %9s %10s %9s %10s  %s\n", "position", "samples", "accepted", "threshold",
              "kept", "precision", "reason");
  for (const PositionFit& p : fit.positions) {
    std::printf("%8d %9lld %9lld %10.4f %9lld %10.4f  %s\n", p.position,
                static_cast<long long>(p.n_samples), static_cast<long long>(p.n_accepted),
                p.threshold, static_cast<long long>(p.n_kept), p.precision, p.reason.c_str());
  }
  std::printf(
      "acceptance by confidence (knots confidence:probability; the adaptive draft policy "
      "cuts rounds with them):\n");
  for (size_t k = 0; k < file.acceptance.size(); ++k) {
    const AcceptanceCurve& c = file.acceptance[k];
    std::printf("%8zu ", k);
    if (c.empty()) std::printf(" (too few samples: uses the nearest earlier position's)");
    for (size_t i = 0; i < c.confidence.size(); ++i)
      std::printf(" %.2f:%.2f", c.confidence[i], c.probability[i]);
    std::printf("\n");
  }
  std::printf("wrote %s\n", out.string().c_str());
  if (a.json) {
    nlohmann::json positions = nlohmann::json::array();
    for (const PositionFit& p : fit.positions) positions.push_back(position_fit_json(p));
    nlohmann::json curves = nlohmann::json::array();
    for (size_t k = 0; k < file.acceptance.size(); ++k)
      curves.push_back(acceptance_curve_json(static_cast<int>(k), file.acceptance[k]));
    const nlohmann::json j = {{"thresholds", fit.thresholds},
                              {"file", out.string()},
                              {"samples", log.size()},
                              {"prompts", prompts.size()},
                              {"target_precision", a.target_precision},
                              {"tau", total.tau()},
                              {"acceptance", total.acceptance()},
                              {"positions", positions},
                              {"acceptance_curves", curves}};
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* sub =
      app.add_subcommand("calibrate",
                         "Fit per-position confidence thresholds for a DSpark drafter (writes "
                         "dspark_thresholds.json next to the drafter)");
  sub->add_option("-m,--model", args->model_dir, "Target model directory")->required();
  sub->add_option("--draft", args->draft_dir, "DSpark drafter directory")->required();
  sub->add_option("--prompts", args->prompts_file,
                  "Prompt file: one prompt per line (or JSON lines with \"prompt\"/\"text\"); "
                  "default: a small built-in set");
  sub->add_option("-n,--max-tokens", args->max_tokens, "Tokens to generate per prompt")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--target-precision", args->target_precision,
                  "Smoothed acceptance precision the kept drafts must reach, in (0, 1)")
      ->check(CLI::Range(1e-6, 1.0 - 1e-6))
      ->capture_default_str();
  sub->add_option("--min-samples", args->min_samples,
                  "Observations a position needs before it may be pruned")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--min-kept", args->min_kept, "Observations a candidate threshold must keep")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--block-size", args->block_size,
                  "Block rows per round (0: the drafter's block_size)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  sub->add_option("-o,--output", args->output,
                  "Thresholds file to write (default: DRAFT/dspark_thresholds.json)");
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object with the fit last");
  return [args] { return run_calibrate(*args); };
}

}  // namespace dspark::cli
