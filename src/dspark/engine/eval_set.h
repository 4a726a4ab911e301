// `dspark eval`: greedy speculative vs plain decoding over a prompt set with categories, measured
// prompt by prompt in one process. Reports tau, acceptance by draft position, decode speedup and
// the identical-output count, per category and overall (docs/cli.md, docs/performance.md).
//
// A prompt set is a JSONL file, one item per line:
//   {"id": "writing-001", "category": "writing", "source": "...", "prompt": "..."}
//   {"id": "mt-004", "category": "multi-turn", "turns": ["first", "second, about the first"]}
//   {"id": "HumanEval/0", "category": "humaneval-completion", "prompt": "def f(...", "raw": true}
// "turns" holds the user messages of a conversation: each turn is rendered through the chat
// template after the earlier turns and the target's own (plain, greedy) answers to them, and each
// turn is one measured generation. "raw": true encodes the prompt as it is (a code completion,
// the tokenizer's special-token template), without the chat template. "id" defaults to the line
// number, "category" to "all".
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/engine/speculative.h"
#include "dspark/engine/text_generation.h"
#include "dspark/io/chat_template.h"
#include "dspark/spec/telemetry.h"

namespace dspark {

struct EvalItem {
  std::string id;
  std::string category = "all";
  std::string source;
  std::vector<std::string> turns;  // user messages (one for a single prompt)
  bool raw = false;                // no chat template
};

// Throws io naming the file and line for a malformed line, a missing prompt / turns, an empty
// turn, a duplicate id, or a file without items.
std::vector<EvalItem> read_eval_set(const std::filesystem::path& file);
// The same over text (`source` names it in errors).
std::vector<EvalItem> parse_eval_set(const std::string& text, const std::string& source);

// One measured generation: one turn of one item, plain then speculative on the same tokens.
struct EvalTurn {
  std::string id;
  std::string category;
  int turn = 0;
  int n_prompt = 0;
  int n_generated = 0;  // plain decoding's tokens
  bool identical = false;
  // FNV-1a (64-bit) of plain decoding's token ids: runs at other batch sizes or on other devices
  // can be compared output by output without storing the tokens.
  uint64_t output_hash = 0;
  double plain_decode_ms = 0, spec_decode_ms = 0;  // time after the first token
  int64_t decode_tokens = 0;                       // tokens after the first (plain run)
  SpecTelemetry spec;
  double plain_tok_per_s() const;
  double spec_tok_per_s() const;
  double speedup() const;
};

// Sums over turns: the speedup of a group is its total plain decode time over its total
// speculative decode time (both decode the same tokens when the outputs are identical).
struct EvalGroup {
  int prompts = 0;  // items
  int turns = 0;
  int identical = 0;
  int slower = 0;  // turns whose speculative decode was slower than plain
  int64_t decode_tokens = 0;
  double plain_decode_ms = 0, spec_decode_ms = 0;
  SpecTelemetry spec;
  void add(const EvalTurn& t);
  double speedup() const;
  nlohmann::json to_json() const;
};

struct EvalSummary {
  std::map<std::string, EvalGroup> categories;
  EvalGroup overall;
};

// Groups by category; an item counts once in `prompts` (its first turn).
EvalSummary summarize_eval(const std::vector<EvalTurn>& turns);
// {"overall": {...}, "categories": {"writing": {...}, ...}}; each group: prompts, turns, tau,
// acceptance, acceptance_by_position, speedup, tok/s, identical, slower.
nlohmann::json eval_summary_json(const EvalSummary& summary);
// One row per category then "overall": prompts, tau, speedup, identical, acceptance by position.
std::string format_eval_table(const EvalSummary& summary);

struct EvalOptions {
  int max_tokens = 128;  // per turn
  SpecConfig spec;       // gamma and the rest
  int limit = 0;         // first N items only (0: all)
  // Items decoded together (each run, plain and speculative, is one batch of this many rows).
  // Tau, acceptance and the outputs are those of batch 1 in f32; the decode times, and so the
  // speedups, are those of the batch (a row's time shares the batch's forwards).
  int batch = 1;
};

// Drafter KV capacity (tokens over all rows) that `run_eval` needs: options.batch rows of the
// longest item (its turns, the chat template's markup and max_tokens per answer).
int eval_kv_tokens(const TextModel& tm, const std::vector<EvalItem>& items,
                   const EvalOptions& options);

// Runs every item (options.batch at a time): per turn plain greedy decoding (the reference, whose
// text becomes the assistant message of the next turn), then speculative decoding with `source`
// on the same prompt tokens; both stop at the model's EOS. A short untimed warm-up of both runs
// first. `chat` renders the non-raw items; it must have a template if any item needs it. on_turn
// sees each finished turn (progress).
std::vector<EvalTurn> run_eval(TextModel& tm, Context& ctx, const ChatTemplate& chat,
                               const std::vector<EvalItem>& items, DraftSource& source,
                               const EvalOptions& options,
                               const std::function<void(const EvalTurn&)>& on_turn = {});

}  // namespace dspark
