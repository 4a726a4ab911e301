// run_eval (engine/eval_set.h): the measured generations of `dspark eval`.
#include <algorithm>
#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/engine/eval_set.h"

namespace dspark {
namespace {

std::vector<int32_t> encode_turn(const TextModel& tm, const ChatTemplate& chat,
                                 const EvalItem& item, const nlohmann::json& messages) {
  if (item.raw) return tm.tokenizer.encode(item.turns[0], /*add_special_tokens=*/true);
  // The template writes the special tokens itself (BOS included where the model wants it).
  return tm.tokenizer.encode(chat.render(messages, /*add_generation_prompt=*/true), false);
}

// The rows' generations in one batch (input order); source null: plain decoding in the same
// loop. Each row's text needs its own detokenizer.
std::vector<RequestOutput> run_rows(TextModel& tm, Context& ctx, DraftSource* source,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const GenerateOptions& o, const SpecConfig& config) {
  std::vector<std::unique_ptr<TokenizerDetokenizer>> detoks;
  std::vector<RequestInput> r(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    detoks.push_back(std::make_unique<TokenizerDetokenizer>(tm.tokenizer));
    r[i].prompt = prompts[i];
    r[i].options = o;
    r[i].detokenizer = detoks.back().get();
  }
  return generate_speculative(*tm.model, ctx, source, std::move(r), config);
}

uint64_t token_hash(const std::vector<int32_t>& tokens) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis, over each id's 4 bytes
  for (int32_t t : tokens) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

}  // namespace

int eval_kv_tokens(const TextModel& tm, const std::vector<EvalItem>& items,
                   const EvalOptions& options) {
  constexpr int kMarkupPerMessage = 32;  // role markers, system prompt share, BOS / EOS
  int longest = 0;
  for (const EvalItem& item : items) {
    int n = 64;
    for (const std::string& t : item.turns)
      n += static_cast<int>(tm.tokenizer.encode(t).size()) + options.max_tokens +
           2 * kMarkupPerMessage;
    longest = std::max(longest, n);
  }
  return std::max(1, options.batch) * (longest + options.spec.gamma + 16);
}

std::vector<EvalTurn> run_eval(TextModel& tm, Context& ctx, const ChatTemplate& chat,
                               const std::vector<EvalItem>& all_items, DraftSource& source,
                               const EvalOptions& options,
                               const std::function<void(const EvalTurn&)>& on_turn) {
  std::vector<EvalItem> items = all_items;
  if (options.limit > 0 && static_cast<size_t>(options.limit) < items.size())
    items.resize(static_cast<size_t>(options.limit));
  const bool needs_chat =
      std::any_of(items.begin(), items.end(), [](const EvalItem& i) { return !i.raw; });
  DSPARK_CHECK_KIND(invalid_input, !needs_chat || chat.has_template(),
                    "the model has no chat template: mark the items \"raw\": true");
  GenerateOptions o;
  o.max_tokens = options.max_tokens;
  o.sampling.temperature = 0.0f;  // greedy: speculative output must equal plain output
  o.eos_token_ids = tm.eos_token_ids;

  std::vector<EvalTurn> out;
  bool warmed = false;
  const size_t batch = static_cast<size_t>(std::max(1, options.batch));
  for (size_t first = 0; first < items.size(); first += batch) {
    const size_t n = std::min(batch, items.size() - first);
    std::vector<nlohmann::json> messages(n, nlohmann::json::array());
    for (size_t t = 0;; ++t) {
      std::vector<size_t> rows;  // items of this group that have a turn t
      std::vector<std::vector<int32_t>> prompts;
      for (size_t i = 0; i < n; ++i) {
        const EvalItem& item = items[first + i];
        if (item.turns.size() <= t) continue;
        messages[i].push_back({{"role", "user"}, {"content", item.turns[t]}});
        rows.push_back(i);
        prompts.push_back(encode_turn(tm, chat, item, messages[i]));
      }
      if (rows.empty()) break;
      if (!warmed) {  // weights paged in, kernels and buffers set up: no timed run pays it
        GenerateOptions warm = o;
        warm.max_tokens = std::min(4, o.max_tokens);
        (void)generate(*tm.model, ctx, prompts[0], warm, nullptr, {});
        (void)run_rows(tm, ctx, &source, {prompts[0]}, warm, options.spec);
        warmed = true;
      }
      // One row: plain decoding is the plain loop itself (engine/generate.h); several: the
      // engine's batched loop without a source.
      std::vector<RequestOutput> plain;
      if (prompts.size() == 1) {
        TokenizerDetokenizer detok(tm.tokenizer);
        plain.push_back({generate(*tm.model, ctx, prompts[0], o, &detok, {}), {}});
      } else {
        plain = run_rows(tm, ctx, nullptr, prompts, o, options.spec);
      }
      const std::vector<RequestOutput> spec = run_rows(tm, ctx, &source, prompts, o, options.spec);
      for (size_t k = 0; k < rows.size(); ++k) {
        const EvalItem& item = items[first + rows[k]];
        const GenerateResult& p = plain[k].result;
        EvalTurn r;
        r.id = item.id;
        r.category = item.category;
        r.turn = static_cast<int>(t);
        r.n_prompt = static_cast<int>(prompts[k].size());
        r.n_generated = p.n_generated;
        r.identical = p.tokens == spec[k].result.tokens;
        r.output_hash = token_hash(p.tokens);
        r.plain_decode_ms = p.timings.decode_ms;
        r.spec_decode_ms = spec[k].result.timings.decode_ms;
        r.decode_tokens = std::max(0, p.n_generated - 1);
        r.spec = spec[k].spec;
        if (on_turn) on_turn(r);
        out.push_back(std::move(r));
        // The next turn sees the target's own answer, as a chat client would.
        messages[rows[k]].push_back({{"role", "assistant"}, {"content", p.text}});
      }
    }
  }
  return out;
}

}  // namespace dspark
