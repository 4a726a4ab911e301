// dspark regen: the target regenerates the responses to a prompt set (drafter training data or
// held-out evaluation), many rows at once, and writes shards of tokens, loss masks and tapped
// hidden states (tools/regen/regen.h). With --draft the generation is speculative (same greedy
// output) and meta.json carries tau and the acceptance by position.
// --taps none --all-target-weights: tokens only, plus every target weight for a training script
// that runs the target itself.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/engine/model_chat_template.h"
#include "dspark/engine/text_generation.h"
#include "dspark/io/chat_template.h"
#include "dspark/model/registry.h"
#include "dspark/spec/source_factory.h"
#include "regen/regen.h"

namespace dspark::cli {
namespace {

struct RegenArgs {
  std::string model_dir;
  std::string prompts_file;
  std::string out_dir;
  std::string device = "cpu";
  int max_tokens = 256;
  int batch = 64;
  std::string taps;
  bool no_final_hidden = false;
  std::string hidden_dtype = "bf16";
  bool all_target_weights = false;
  bool chat = false;
  std::string chat_template;
  std::string system;
  int64_t shard_tokens = 1 << 18;
  int tap_chunk = 8192;
  double max_seconds = 0;
  int64_t limit = 0;
  float temperature = 0;
  uint64_t seed = 0;
  std::string draft = "none";
  std::optional<int> gamma;
  bool no_markov = false;
  bool no_thresholds = false;
  int ngram_min = 1, ngram_max = 4;
  bool json = false;
};

std::vector<int> parse_taps(const std::string& text) {
  std::vector<int> taps;
  if (text.empty() || text == "none") return taps;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      taps.push_back(std::stoi(item, &used));
      DSPARK_CHECK_KIND(invalid_input, used == item.size(), "--taps: '{}' is not an integer", item);
    } catch (const std::logic_error&) {
      DSPARK_FAIL(invalid_input, "--taps: '{}' is not an integer", item);
    }
  }
  return taps;
}

// One JSON object per line: {"id", "prompt"} or {"id", "messages": [...]} ("id" optional).
struct PromptLine {
  std::string id;
  nlohmann::json messages;  // array, or null for a plain prompt
  std::string prompt;
};

std::vector<PromptLine> read_prompt_lines(const std::string& file) {
  std::ifstream in(file);
  DSPARK_CHECK_KIND(invalid_input, in.good(), "--prompts: cannot read '{}'", file);
  std::vector<PromptLine> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    DSPARK_CHECK_KIND(invalid_input, j.is_object(), "--prompts: {} line {}: not a JSON object",
                      file, line_no);
    PromptLine p;
    p.id = j.contains("id") ? (j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump())
                            : std::to_string(out.size());
    if (j.contains("messages")) {
      DSPARK_CHECK_KIND(invalid_input, j["messages"].is_array() && !j["messages"].empty(),
                        "--prompts: {} line {}: \"messages\" must be a non-empty array", file,
                        line_no);
      p.messages = j["messages"];
    } else {
      DSPARK_CHECK_KIND(invalid_input, j.contains("prompt") && j["prompt"].is_string(),
                        "--prompts: {} line {}: needs a \"prompt\" string or \"messages\"", file,
                        line_no);
      p.prompt = j["prompt"].get<std::string>();
    }
    out.push_back(std::move(p));
  }
  DSPARK_CHECK_KIND(invalid_input, !out.empty(), "--prompts: '{}' holds no prompts", file);
  return out;
}

ChatTemplate load_template(const RegenArgs& a, const TextModel& tm) {
  if (!a.chat_template.empty()) {
    std::ifstream in(a.chat_template);
    DSPARK_CHECK_KIND(invalid_input, in.good(), "--chat-template: cannot read '{}'",
                      a.chat_template);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string eos =
        tm.eos_token_ids.empty() ? "" : tm.tokenizer.decode({&tm.eos_token_ids[0], 1}, false);
    return ChatTemplate::from_string(ss.str(), "", eos);
  }
  ChatTemplate t = load_model_chat_template(a.model_dir);  // a model directory or a GGUF file
  DSPARK_CHECK_KIND(invalid_input, t.has_template(),
                    "--chat: '{}' has no chat template; give --chat-template FILE", a.model_dir);
  return t;
}

int run_regen_command(const RegenArgs& a) {
  const Device device = parse_device(a.device);
  Context ctx(device);
  std::vector<PromptLine> lines = read_prompt_lines(a.prompts_file);
  if (a.limit > 0 && static_cast<int64_t>(lines.size()) > a.limit)
    lines.resize(static_cast<size_t>(a.limit));
  TextModel tm = load_text_model(a.model_dir, device, default_engine_dtype(device));

  std::optional<ChatTemplate> tmpl;
  if (a.chat) tmpl = load_template(a, tm);
  std::vector<RegenPrompt> prompts;
  prompts.reserve(lines.size());
  const std::filesystem::path out(a.out_dir);
  std::filesystem::create_directories(out);
  // The rendered chat prompts, as `dspark calibrate --prompts` and other tools read them.
  std::optional<std::ofstream> rendered;
  if (a.chat) rendered.emplace(out / "prompts_rendered.jsonl");
  for (const PromptLine& l : lines) {
    RegenPrompt p;
    p.id = l.id;
    if (a.chat) {
      nlohmann::json messages = l.messages;
      if (messages.is_null())
        messages = nlohmann::json::array({{{"role", "user"}, {"content", l.prompt}}});
      if (!a.system.empty() && messages[0].value("role", "") != "system")
        messages.insert(messages.begin(), {{"role", "system"}, {"content", a.system}});
      const std::string text = tmpl->render(messages, true);
      p.tokens = tm.tokenizer.encode(text, false);
      *rendered << nlohmann::json({{"id", l.id}, {"prompt", text}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      DSPARK_CHECK_KIND(invalid_input, l.messages.is_null(),
                        "--prompts: prompt '{}' has \"messages\"; they need --chat", l.id);
      p.tokens = tm.tokenizer.encode(l.prompt, true);
    }
    DSPARK_CHECK_KIND(invalid_input, !p.tokens.empty(), "prompt '{}' encodes to no tokens", l.id);
    prompts.push_back(std::move(p));
  }

  RegenOptions o;
  o.generate.max_tokens = a.max_tokens;
  o.generate.eos_token_ids = tm.eos_token_ids;
  o.generate.sampling.temperature = a.temperature;
  o.generate.seed = a.seed;
  o.batch = a.batch;
  o.tap_layers = parse_taps(a.taps);
  o.final_hidden = !o.tap_layers.empty() && !a.no_final_hidden;
  o.hidden_dtype = a.hidden_dtype == "f32" ? DType::f32 : DType::bf16;
  o.shard_tokens = a.shard_tokens;
  o.tap_chunk_tokens = a.tap_chunk;
  o.max_seconds = a.max_seconds;

  // Draft source (evaluation), with the drafter ablations --no-markov and --no-thresholds.
  std::unique_ptr<DraftSource> source;
  std::string kind = "none";
  int default_gamma = 0;
  size_t longest = 1;
  for (const RegenPrompt& p : prompts) longest = std::max(longest, p.tokens.size());
  const int64_t kv = std::min<int64_t>(
      static_cast<int64_t>(std::min<size_t>(static_cast<size_t>(a.batch), prompts.size())) *
          (static_cast<int64_t>(longest) + a.max_tokens + 96),
      1 << 28);
  if (a.draft != "none") {
    DraftOptions d;
    d.draft = a.draft;
    d.ngram = NgramConfig{a.ngram_min, a.ngram_max};
    d.draft_model_kv_tokens = static_cast<int>(kv);
    d.markov = !a.no_markov;
    d.thresholds = !a.no_thresholds;
    CreatedSource c = create_draft_source(d, *tm.model);
    source = std::move(c.source);
    kind = c.kind;
    default_gamma = c.default_gamma > 0 ? c.default_gamma : 4;
  }
  o.gamma = source ? (a.gamma ? *a.gamma : default_gamma) : 0;

  if (rendered) rendered->close();
  if (a.all_target_weights)
    write_target_model(*tm.model, ctx, a.model_dir, out / "target_weights.safetensors");
  else if (!o.tap_layers.empty())
    write_target_weights(*tm.model, ctx, out / "target_weights.safetensors");
  auto detok = [&](const std::vector<int32_t>& ids) { return tm.tokenizer.decode(ids, true); };
  auto log = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  log("regen: " + std::to_string(prompts.size()) + " prompts, batch " + std::to_string(a.batch) +
      ", max " + std::to_string(a.max_tokens) + " tokens, draft " + kind +
      (source
           ? " (gamma " + std::to_string(o.gamma) + (a.no_markov ? ", Markov head off" : "") + ")"
           : "") +
      ", " + std::to_string(o.tap_layers.size()) + " taps, on " + device.name());
  const RegenSummary s = run_regen(*tm.model, ctx, source.get(), prompts, o, out, detok, log);

  std::printf(
      "regen: %lld sequences (%lld prompt + %lld response tokens) in %lld shards under %s\n",
      static_cast<long long>(s.n_sequences), static_cast<long long>(s.n_prompt_tokens),
      static_cast<long long>(s.n_response_tokens), static_cast<long long>(s.n_shards),
      out.string().c_str());
  std::printf("regen: %.1f s (generate %.1f s, %.0f tok/s; taps %.1f s)%s\n", s.total_s,
              s.generate_s, s.generate_s > 0 ? s.n_response_tokens / s.generate_s : 0.0, s.taps_s,
              s.stopped_early ? " -- stopped early (time budget)" : "");
  if (source) {
    std::printf("regen: draft %s, gamma %d: tau %.3f, acceptance %.3f, %lld rounds\n", kind.c_str(),
                o.gamma, s.spec.tau(), s.spec.acceptance(), static_cast<long long>(s.spec.rounds));
  }
  if (a.json) {
    nlohmann::json j = {{"sequences", s.n_sequences}, {"response_tokens", s.n_response_tokens},
                        {"seconds", s.total_s},       {"draft", kind},
                        {"gamma", o.gamma},           {"markov", !a.no_markov}};
    if (source) j["spec"] = s.spec.to_json();
    std::printf("%s\n", j.dump().c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

Command add_regen_command(CLI::App& app) {
  auto args = std::make_shared<RegenArgs>();
  CLI::App* sub = app.add_subcommand(
      "regen",
      "Regenerate responses with the target and write drafter training shards (tokens, loss "
      "mask, tapped hidden states); with --draft, evaluate a draft source on the prompts");
  sub->add_option("-m,--model", args->model_dir, "Target model")->required();
  sub->add_option("--prompts", args->prompts_file,
                  "JSON lines: {\"id\", \"prompt\"} or {\"id\", \"messages\": [...]}")
      ->required();
  sub->add_option("--out", args->out_dir, "Output directory")->required();
  sub->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("-n,--max-tokens", args->max_tokens, "Response tokens at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--batch", args->batch, "Rows generated together")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--taps", args->taps,
                  "Target layers to tap, comma-separated (0-based layer outputs, -1 = "
                  "embedding); none: no hidden states");
  sub->add_flag("--no-final-hidden", args->no_final_hidden,
                "Do not store the final-normed hidden states (stored with --taps by default)");
  sub->add_option("--hidden-dtype", args->hidden_dtype,
                  "dtype of the stored taps and final hidden states (f32: parity checks)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  sub->add_flag("--all-target-weights", args->all_target_weights,
                "Write every weight of the target (all layers, rope table, config) to "
                "target_weights.safetensors, also without --taps: for a training script that "
                "runs the target itself (tools/train/target_forward.py)");
  sub->add_flag("--chat", args->chat, "Render prompts through the chat template");
  sub->add_option(
      "--chat-template", args->chat_template,
      "Jinja chat template file (default: the model's own, from its directory or GGUF)");
  sub->add_option("--system", args->system, "System message added to chat prompts");
  sub->add_option("--shard-tokens", args->shard_tokens, "Tokens per shard")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--tap-chunk", args->tap_chunk, "Tokens per tap forward")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--max-seconds", args->max_seconds,
                  "Admit no new prompt after this many seconds (0: no limit)")
      ->check(CLI::Range(0.0, 1e9));
  sub->add_option("--limit", args->limit, "Use the first N prompts (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Sampling seed");
  sub->add_option("--draft", args->draft,
                  "Draft source while generating: none, ngram, mtp, model:DIR or DIR (a drafter)")
      ->capture_default_str();
  sub->add_option("--gamma", args->gamma, "Drafts per round (default: the drafter's)")
      ->check(CLI::Range(0, 64));
  sub->add_flag("--no-markov", args->no_markov,
                "DSpark drafter: ignore the Markov head (the backbone as plain DFlash)");
  sub->add_flag("--no-thresholds", args->no_thresholds,
                "DSpark drafter: ignore dspark_thresholds.json (no pruning)");
  sub->add_option("--ngram-min", args->ngram_min, "Prompt lookup: shortest n-gram")
      ->check(CLI::Range(1, 64));
  sub->add_option("--ngram-max", args->ngram_max, "Prompt lookup: longest n-gram")
      ->check(CLI::Range(1, 64));
  sub->add_flag("--json", args->json, "Print one JSON summary line last");
  return [args] { return run_regen_command(*args); };
}

}  // namespace dspark::cli
