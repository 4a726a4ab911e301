// dspark perplexity: a model's perplexity over a text file (engine/perplexity.h), with a progress
// bar on stderr; a summary table on stdout, or one JSON line with --json.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/core/progress_bar.h"
#include "dspark/engine/perplexity.h"
#include "dspark/engine/text_generation.h"
#include "dspark/model/registry.h"

namespace dspark::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string file;
  int context = 512;
  int windows = 0;
  std::string device = "cpu";
  bool json = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DSPARK_CHECK_KIND(io, in.good(), "cannot read text file '{}'", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

int run_perplexity(const PerplexityArgs& a) {
  const std::string text = read_text(a.file);
  const Device device = parse_device(a.device);
  Context ctx(device);
  TextModel tm = load_text_model(a.model, device, default_engine_dtype(device));
  const std::vector<int32_t> tokens = tm.tokenizer.encode(text, false);
  PerplexityOptions o;
  o.context = a.context;
  o.max_windows = a.windows;
  // Models whose tokenizer starts every text with BOS see it at the start of each window.
  const std::vector<int32_t> special = tm.tokenizer.encode("", true);
  if (!special.empty() && special.front() == tm.tokenizer.bos_id()) o.bos = special.front();

  ProgressBar bar(stderr, "windows");
  const PerplexityResult r =
      perplexity(*tm.model, ctx, tokens, o, [&](int done, int total, double ppl) {
        bar.update(done, total, 0, 0, fmt::format("ppl {:.4f}", ppl));
      });
  bar.finish();
  const double tok_per_s = static_cast<double>(r.windows) * a.context / r.seconds;
  if (a.json) {
    const nlohmann::json j = {
        {"model", a.model},           {"file", a.file},           {"device", device.name()},
        {"context", a.context},       {"windows", r.windows},     {"text_tokens", r.text_tokens},
        {"scored_tokens", r.scored},  {"bos", o.bos.has_value()}, {"ppl", r.ppl},
        {"ppl_stderr", r.ppl_stderr}, {"mean_nll", r.mean_nll},   {"nll_stderr", r.nll_stderr},
        {"window_ppl", r.window_ppl}, {"seconds", r.seconds},     {"tok_per_s", tok_per_s}};
    std::fprintf(stdout, "%s\n", j.dump().c_str());
    return 0;
  }
  fmt::print("model        {}\n", a.model);
  fmt::print("text         {}: {} tokens, {} windows of {} ({} tokens scored{})\n", a.file,
             r.text_tokens, r.windows, a.context, r.scored, o.bos ? ", BOS first" : "");
  fmt::print("perplexity   {:.4f} +- {:.4f}\n", r.ppl, r.ppl_stderr);
  fmt::print("mean NLL     {:.5f} +- {:.5f} nats per token\n", r.mean_nll, r.nll_stderr);
  fmt::print("time         {:.2f} s ({:.1f} tokens/s forwarded, {})\n", r.seconds, tok_per_s,
             device.name());
  return 0;
}

}  // namespace

Command add_perplexity_command(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* sub = app.add_subcommand(
      "perplexity",
      "Perplexity of a model over a text file, in windows whose second half is scored (as "
      "llama.cpp's llama-perplexity)");
  sub->add_option("-m,--model", args->model, "Model: a directory or a .gguf file")->required();
  sub->add_option("-f,--file", args->file, "The text to score (UTF-8)")->required();
  sub->add_option("-c,--context", args->context,
                  "Tokens per window; each window's second half is scored")
      ->check(CLI::Range(4, 1 << 20))
      ->capture_default_str();
  sub->add_option("--windows", args->windows, "Score only the first N windows (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON line instead of the table");
  return [args] { return run_perplexity(*args); };
}

}  // namespace dspark::cli
