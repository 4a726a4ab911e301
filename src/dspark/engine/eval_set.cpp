#include "dspark/engine/eval_set.h"

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"

namespace dspark {

std::vector<EvalItem> parse_eval_set(const std::string& text, const std::string& source) {
  std::vector<EvalItem> items;
  std::set<std::string> ids;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", source, n);
    const nlohmann::json j = parse_json_text(line, where);
    DSPARK_CHECK_KIND(io, j.is_object(), "{}: each line must be a JSON object", where);
    EvalItem item;
    item.id = json_optional_string(j, "id", where).value_or(std::to_string(n));
    item.category = json_optional_string(j, "category", where).value_or("all");
    item.source = json_optional_string(j, "source", where).value_or("");
    item.raw = json_optional_bool(j, "raw", where).value_or(false);
    const bool has_prompt = j.contains("prompt") && !j["prompt"].is_null();
    const bool has_turns = j.contains("turns") && !j["turns"].is_null();
    DSPARK_CHECK_KIND(io, has_prompt != has_turns,
                      "{}: give exactly one of \"prompt\" (a string) and \"turns\" (a list of "
                      "strings)",
                      where);
    if (has_prompt) {
      item.turns.push_back(json_string(j, "prompt", where));
    } else {
      DSPARK_CHECK_KIND(io, j["turns"].is_array() && !j["turns"].empty(),
                        "{}: \"turns\" must be a non-empty list of strings", where);
      for (const auto& t : j["turns"]) {
        DSPARK_CHECK_KIND(io, t.is_string(), "{}: \"turns\" must hold strings, got {}", where,
                          json_brief(t));
        item.turns.push_back(t.get<std::string>());
      }
    }
    for (const std::string& t : item.turns)
      DSPARK_CHECK_KIND(io, !t.empty(), "{}: empty prompt", where);
    DSPARK_CHECK_KIND(io, !item.raw || item.turns.size() == 1,
                      "{}: a raw item (no chat template) has one prompt, not turns", where);
    DSPARK_CHECK_KIND(io, ids.insert(item.id).second, "{}: duplicate id '{}'", where, item.id);
    items.push_back(std::move(item));
  }
  DSPARK_CHECK_KIND(io, !items.empty(), "{}: no prompts", source);
  return items;
}

std::vector<EvalItem> read_eval_set(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  DSPARK_CHECK_KIND(io, in.good(), "{}: cannot read the prompt set", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_eval_set(text.str(), file.string());
}

double EvalTurn::plain_tok_per_s() const {
  return plain_decode_ms > 0 ? decode_tokens / (plain_decode_ms / 1e3) : 0;
}
double EvalTurn::spec_tok_per_s() const {
  return spec_decode_ms > 0 ? decode_tokens / (spec_decode_ms / 1e3) : 0;
}
double EvalTurn::speedup() const {
  return spec_decode_ms > 0 ? plain_decode_ms / spec_decode_ms : 0;
}

void EvalGroup::add(const EvalTurn& t) {
  if (t.turn == 0) ++prompts;
  ++turns;
  identical += t.identical;
  slower += t.spec_decode_ms > t.plain_decode_ms;
  decode_tokens += t.decode_tokens;
  plain_decode_ms += t.plain_decode_ms;
  spec_decode_ms += t.spec_decode_ms;
  spec.merge(t.spec);
}

double EvalGroup::speedup() const {
  return spec_decode_ms > 0 ? plain_decode_ms / spec_decode_ms : 0;
}

nlohmann::json EvalGroup::to_json() const {
  const nlohmann::json s = spec.to_json();
  return {{"prompts", prompts},
          {"turns", turns},
          {"identical", identical},
          {"slower_than_plain", slower},
          {"decode_tokens", decode_tokens},
          {"plain_decode_ms", plain_decode_ms},
          {"spec_decode_ms", spec_decode_ms},
          {"plain_tok_per_s", plain_decode_ms > 0 ? decode_tokens / (plain_decode_ms / 1e3) : 0.0},
          {"spec_tok_per_s", spec_decode_ms > 0 ? decode_tokens / (spec_decode_ms / 1e3) : 0.0},
          {"speedup", speedup()},
          {"tau", spec.tau()},
          {"rounds", spec.rounds},
          {"drafted", spec.drafted},
          {"accepted", spec.accepted},
          {"acceptance", spec.acceptance()},
          {"acceptance_by_position", s["acceptance_by_position"]},
          {"drafted_by_position", spec.drafted_at},
          {"accepted_by_position", spec.accepted_at},
          {"mean_draft_length", spec.mean_draft_length()},
          {"drafts_cut", spec.drafts_cut}};
}

EvalSummary summarize_eval(const std::vector<EvalTurn>& turns) {
  EvalSummary s;
  for (const EvalTurn& t : turns) {
    s.categories[t.category].add(t);
    s.overall.add(t);
  }
  return s;
}

nlohmann::json eval_summary_json(const EvalSummary& summary) {
  nlohmann::json cats = nlohmann::json::object();
  for (const auto& [name, g] : summary.categories) cats[name] = g.to_json();
  return {{"overall", summary.overall.to_json()}, {"categories", cats}};
}

std::string format_eval_table(const EvalSummary& summary) {
  std::string out =
      fmt::format("{:<24} {:>7} {:>6} {:>6} {:>8} {:>9} {:>7}  {}\n", "category", "prompts",
                  "turns", "tau", "speedup", "identical", "slower", "acceptance by draft position");
  auto row = [&](const std::string& name, const EvalGroup& g) {
    std::string acc;
    for (size_t j = 0; j < g.spec.drafted_at.size(); ++j)
      acc += fmt::format("{}{:.2f}", j ? " " : "",
                         g.spec.drafted_at[j] > 0
                             ? static_cast<double>(g.spec.accepted_at[j]) / g.spec.drafted_at[j]
                             : 0.0);
    out += fmt::format("{:<24} {:>7} {:>6} {:>6.2f} {:>7.2f}x {:>5}/{:<3} {:>7}  {}\n", name,
                       g.prompts, g.turns, g.spec.tau(), g.speedup(), g.identical, g.turns,
                       g.slower, acc);
  };
  for (const auto& [name, g] : summary.categories) row(name, g);
  row("overall", summary.overall);
  return out;
}

}  // namespace dspark
