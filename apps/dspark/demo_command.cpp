// dspark demo: what `make run` shows. Answers a prompt through the model's chat template with
// speculative decoding, streaming the text, then decodes the same prompt without speculation and
// prints one table measured in this run: plain and speculative tok/s, speedup, tau, acceptance by
// draft position, and whether the outputs are identical (greedy, and sampled with coupled
// speculative sampling and the same seed: they must be in f32 on the CPU, where a difference is a
// bug and the exit status is 1; in bf16 on CUDA a near-tie can round differently in a verify
// forward than in a decode forward, which the table says, unless --exact makes the forward
// batch-invariant (then a difference is a bug again); rejection sampling may differ).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "cost_cache_options.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/engine/model_chat_template.h"
#include "dspark/engine/side_by_side.h"
#include "dspark/engine/spec_sampling.h"
#include "dspark/model/registry.h"
#include "dspark/spec/source_factory.h"

namespace dspark::cli {
namespace {

// Acceptance depends on the text: code and lists draft well, open prose less (the bundled SmolLM2
// drafter: tau ~5.5 on this prompt, 2.6 averaged over the 128 held-out prompts of tools/train).
constexpr const char* kDefaultPrompt =
    "Write a Python function that checks whether a number is prime, and explain how it works.";

struct DemoArgs {
  std::string model;
  std::string draft = "ngram";
  std::string draft_vocab;
  std::string prompt = kDefaultPrompt;
  std::string system;
  int max_tokens = 256;
  float temperature = 0.0f;  // greedy by default
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::string spec_sampling = "coupled";
  std::optional<int> gamma;
  std::string draft_policy = "adaptive";
  CostCacheArgs cost_cache;
  std::string device = "cpu";
  bool raw = false;
  bool json = false;
  bool cuda_graphs = true;  // CUDA: replay captured decode / verify forwards
  bool exact = false;       // CUDA: batch-invariant numerics (--exact)
};

std::vector<int32_t> encode_prompt(const DemoArgs& a, const TextModel& tm) {
  const ChatTemplate tmpl = a.raw ? ChatTemplate() : load_model_chat_template(a.model);
  if (!tmpl.has_template()) {
    if (!a.raw) std::fprintf(stderr, "dspark demo: the model has no chat template: raw prompt\n");
    return tm.tokenizer.encode(a.prompt, /*add_special_tokens=*/true);
  }
  nlohmann::json messages = nlohmann::json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  messages.push_back({{"role", "user"}, {"content", a.prompt}});
  // The template writes the special tokens itself (BOS included where the model wants it).
  return tm.tokenizer.encode(tmpl.render(messages, /*add_generation_prompt=*/true), false);
}

void print_table(const SideBySideResult& r, const std::string& kind, int gamma, bool bf16,
                 bool may_differ) {
  const SpecTelemetry& s = r.speculative.spec;
  std::printf("\n%-26s %8s %9s\n", "", "tokens", "tok/s");
  std::printf("%-26s %8d %9.1f\n", "plain", r.plain.n_generated, r.plain_tok_per_s);
  const std::string spec_name = fmt::format("speculative ({}, γ={})", kind, gamma);
  std::printf("%-27s %8d %9.1f   speedup %.2fx\n", spec_name.c_str(),
              r.speculative.result.n_generated, r.spec_tok_per_s, r.speedup());
  std::printf("tau %.2f tokens per target forward; acceptance %.2f; identical output: %s\n",
              s.tau(), s.acceptance(), r.identical ? "yes" : "NO");
  if (!r.identical && may_differ)
    std::printf(
        "(rejection sampling: the text depends on the drafts; --spec-sampling coupled "
        "gives the plain text for the same seed)\n");
  else if (!r.identical && bf16)
    std::printf(
        "(bf16 on CUDA: a near-tie rounded differently in a multi-token verify forward than "
        "in a one-token decode forward; --exact gives identical output)\n");
  std::string by_pos;
  for (size_t j = 0; j < s.drafted_at.size(); ++j) {
    if (s.drafted_at[j] == 0) break;
    by_pos += fmt::format(" {:.2f}", static_cast<double>(s.accepted_at[j]) / s.drafted_at[j]);
  }
  if (!by_pos.empty()) std::printf("acceptance by draft position:%s\n", by_pos.c_str());
}

int run_demo(const DemoArgs& a) {
  const Device device = parse_device(a.device);
  Context ctx(device);
  ctx.cuda_tuning().batch_invariant = a.exact;
  TextModel tm = load_text_model(a.model, device, default_engine_dtype(device));
  if (device.is_cuda()) tm.model->set_cuda_graphs(a.cuda_graphs);
  const std::vector<int32_t> prompt = encode_prompt(a, tm);

  DraftOptions draft_options;
  draft_options.draft = a.draft;
  draft_options.draft_vocab = a.draft_vocab;
  draft_options.draft_model_kv_tokens = std::max(4096, 2 * (a.max_tokens + 64) + 4096);
  CreatedSource created = create_draft_source(draft_options, *tm.model);
  SpecConfig config;
  config.gamma = a.gamma ? *a.gamma : created.default_gamma;
  config.draft_policy = parse_draft_policy(a.draft_policy);
  config.cost_cache = cost_cache_config(a.cost_cache, a.model, device);
  config.log = [](std::string_view line) {
    std::fprintf(stderr, "dspark demo: %.*s\n", static_cast<int>(line.size()), line.data());
  };

  // Greedy, or coupled sampling: the speculative answer must equal the plain one.
  GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_p = a.top_p;
  o.sampling.spec = *spec_sampling_from_name(a.spec_sampling);
  o.seed = a.seed;
  const bool may_differ = !o.sampling.greedy() && o.sampling.spec == SpecSampling::rejection;
  std::printf("dspark demo: %s on %s, draft %s (gamma %d, %s)\n> %s\n\n", a.model.c_str(),
              device.name().c_str(), created.kind.c_str(), config.gamma, a.draft_policy.c_str(),
              a.prompt.c_str());
  std::fflush(stdout);
  bool ends_with_newline = false;
  const SideBySideResult r =
      run_side_by_side(tm, ctx, prompt, o, created.source.get(), config, [&](std::string_view t) {
        std::fwrite(t.data(), 1, t.size(), stdout);
        std::fflush(stdout);
        ends_with_newline = !t.empty() && t.back() == '\n';
      });
  if (!ends_with_newline) std::fputc('\n', stdout);
  // bf16 without --exact: a verify row may round differently from its decode row.
  const bool bf16 = tm.model->activation_dtype() != DType::f32 && !a.exact;
  print_table(r, created.kind, config.gamma, bf16, may_differ);
  if (a.json) {
    nlohmann::json j = {{"model", a.model},
                        {"device", device.name()},
                        {"draft", created.kind},
                        {"gamma", config.gamma},
                        {"temperature", a.temperature},
                        {"top_p", a.top_p},
                        {"seed", a.seed},
                        {"spec_sampling", a.spec_sampling},
                        {"n_prompt", static_cast<int>(prompt.size())},
                        {"plain_tok_per_s", r.plain_tok_per_s},
                        {"spec_tok_per_s", r.spec_tok_per_s},
                        {"speedup", r.speedup()},
                        {"identical", r.identical},
                        {"n_generated", r.speculative.result.n_generated},
                        {"spec", r.speculative.spec.to_json()}};
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return r.identical || bf16 || may_differ ? 0 : 1;
}

}  // namespace

Command add_demo_command(CLI::App& app) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* sub = app.add_subcommand(
      "demo",
      "Answer a prompt with speculative decoding (streamed), then compare with plain "
      "decoding in the same run (what `make run` shows)");
  sub->add_option("-m,--model", args->model, "Model: a directory or a .gguf file")->required();
  sub->add_option("--draft", args->draft,
                  "Draft source: ngram, mtp (the target's MTP layer), model:DIR or DIR (a "
                  "DFlash/DSpark drafter)")
      ->capture_default_str();
  sub->add_option("--draft-vocab", args->draft_vocab,
                  "A DSpark/DFlash drafter drafts greedy rounds over only these token ids (a JSON "
                  "list, e.g. from tools/train/make_draft_vocab.py)");
  sub->add_option("-p,--prompt", args->prompt, "The user message (default: a built-in question)");
  sub->add_option("--system", args->system, "A system message before it");
  sub->add_option("-n,--max-tokens", args->max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--temperature", args->temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  sub->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1] (1 = off)")
      ->check(CLI::Range(1e-6f, 1.0f))
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  add_spec_sampling_option(sub, args->spec_sampling);
  sub->add_option("--gamma", args->gamma,
                  "Drafted tokens per round at most (default: the drafter's block, else 4)")
      ->check(CLI::Range(0, 64));
  add_draft_policy_option(sub, args->draft_policy);
  add_cost_cache_options(sub, args->cost_cache);
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_flag("--raw", args->raw, "Send the prompt as it is, without the chat template");
  sub->add_flag("--json", args->json, "Print the measurements as one JSON line at the end");
  sub->add_flag("!--no-cuda-graphs", args->cuda_graphs,
                "CUDA: run every forward eagerly instead of replaying captured CUDA graphs");
  add_exact_option(sub, args->exact);
  return [args] { return run_demo(*args); };
}

}  // namespace dspark::cli
