// `dspark eval`'s prompt sets and summaries (engine/eval_set.h): parsing with defaults and
// line-numbered errors, grouping by category (an item counts once, its turns each), speedup as
// total plain over total speculative decode time, acceptance by position summed over turns.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/engine/eval_set.h"

namespace dspark {
namespace {

TEST(EvalSet, ParsesPromptsTurnsAndDefaults) {
  const std::string text =
      R"({"id": "a", "category": "math", "source": "hand", "prompt": "1 + 1?"})"
      "\n\n"
      R"({"category": "multi-turn", "turns": ["first", "second"]})"
      "\n"
      R"({"id": "c", "prompt": "def f():", "raw": true})"
      "\n";
  const std::vector<EvalItem> items = parse_eval_set(text, "set.jsonl");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].id, "a");
  EXPECT_EQ(items[0].category, "math");
  EXPECT_EQ(items[0].source, "hand");
  EXPECT_EQ(items[0].turns, std::vector<std::string>{"1 + 1?"});
  EXPECT_FALSE(items[0].raw);
  EXPECT_EQ(items[1].id, "3");  // the line number (blank lines count)
  EXPECT_EQ(items[1].turns, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(items[2].category, "all");
  EXPECT_TRUE(items[2].raw);
}

void expect_error(const std::string& text, const std::string& part) {
  try {
    (void)parse_eval_set(text, "set.jsonl");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(EvalSet, RejectsMalformedLines) {
  expect_error(R"({"prompt": "a", "turns": ["b"]})", "set.jsonl line 1: give exactly one");
  expect_error(R"({"id": "x"})", "give exactly one");
  expect_error(R"({"turns": []})", "non-empty list");
  expect_error(R"({"turns": ["a", 1]})", "must hold strings");
  expect_error(R"({"prompt": ""})", "empty prompt");
  expect_error(R"({"prompt": 3})", "prompt");
  expect_error(R"({"turns": ["a", "b"], "raw": true})", "raw item");
  expect_error("[1, 2]", "must be a JSON object");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"a\", \"prompt\": \"y\"}",
               "line 2: duplicate id 'a'");
  expect_error("\n \n", "no prompts");
  EXPECT_THROW((void)read_eval_set("/no/such/set.jsonl"), Error);
}

EvalTurn turn(const std::string& id, const std::string& cat, int t, double plain_ms, double spec_ms,
              int rounds, int accepted_first) {
  EvalTurn r;
  r.id = id;
  r.category = cat;
  r.turn = t;
  r.identical = true;
  r.plain_decode_ms = plain_ms;
  r.spec_decode_ms = spec_ms;
  r.decode_tokens = 10;
  for (int i = 0; i < rounds; ++i) r.spec.record_round(2, i < accepted_first ? 1 : 0);
  return r;
}

TEST(EvalSet, SummarizesByCategory) {
  std::vector<EvalTurn> turns = {turn("a", "x", 0, 100, 50, 4, 2),
                                 turn("b", "y", 0, 100, 200, 2, 0),
                                 turn("b", "y", 1, 100, 50, 2, 2)};
  turns[2].identical = false;
  const EvalSummary s = summarize_eval(turns);
  ASSERT_EQ(s.categories.size(), 2u);
  const EvalGroup& y = s.categories.at("y");
  EXPECT_EQ(y.prompts, 1);
  EXPECT_EQ(y.turns, 2);
  EXPECT_EQ(y.identical, 1);
  EXPECT_EQ(y.slower, 1);
  EXPECT_DOUBLE_EQ(y.speedup(), 200.0 / 250.0);
  EXPECT_EQ(s.overall.prompts, 2);
  EXPECT_EQ(s.overall.turns, 3);
  EXPECT_DOUBLE_EQ(s.overall.speedup(), 300.0 / 300.0);
  // Rounds 8, emitted 8 + accepted 4.
  EXPECT_DOUBLE_EQ(s.overall.spec.tau(), 12.0 / 8.0);

  const nlohmann::json j = eval_summary_json(s);
  EXPECT_EQ(j["categories"]["x"]["prompts"], 1);
  EXPECT_DOUBLE_EQ(j["categories"]["x"]["acceptance_by_position"][0].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["categories"]["x"]["acceptance_by_position"][1].get<double>(), 0.0);
  EXPECT_EQ(j["overall"]["identical"], 2);
  EXPECT_EQ(j["overall"]["slower_than_plain"], 1);

  const std::string table = format_eval_table(s);
  EXPECT_NE(table.find("\nx "), std::string::npos) << table;
  EXPECT_NE(table.find("\ny "), std::string::npos) << table;
  EXPECT_NE(table.find("\noverall "), std::string::npos) << table;
  EXPECT_NE(table.find("0.50 0.00"), std::string::npos) << table;
}

}  // namespace
}  // namespace dspark
