// Exact parity with the Hugging Face `tokenizers` library on six published tokenizers: every case
// of tests/data/tokenizers/<name>/cases.jsonl.xz (written by tools/tokenizer_goldens.py) must
// match -- encode with and without special tokens, decode with and without skipping special
// tokens, and IncrementalDecoder (whose pieces must each be valid UTF-8) against decode.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/tokenizer.h"
#include "dspark/io/utf8.h"
#include "dspark/io/xz.h"

namespace dspark {
namespace {

using Json = nlohmann::json;

std::filesystem::path tokenizer_dir(const std::string& name) {
  return test::data_dir() / "tokenizers" / name;
}

std::string show_ids(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  s << "]";
  return s.str();
}

// Decodes `ids` one id at a time; fails the test if a piece is not valid UTF-8.
std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                          bool& pieces_valid) {
  IncrementalDecoder decoder(tok, skip);
  std::string text;
  for (const int32_t id : ids) {
    const std::string piece = decoder.feed(id);
    pieces_valid = pieces_valid && utf8::find_invalid(piece) == std::string::npos;
    text += piece;
  }
  const std::string rest = decoder.flush();
  pieces_valid = pieces_valid && utf8::find_invalid(rest) == std::string::npos;
  return text + rest;
}

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, MatchesHuggingFace) {
  const std::string name = GetParam();
  const auto dir = tokenizer_dir(name);
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::from_file(dir / "tokenizer.json.xz");
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::istringstream lines(read_file_maybe_xz(dir / "cases.jsonl.xz"));
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const Json header = Json::parse(line);
  const Json& meta = header.at("meta");
  EXPECT_EQ(tok.vocab_size(), meta.at("vocab_size").get<int>());
  for (const Json& added : header.at("added")) {
    const auto content = added[0].get<std::string>();
    const auto id = added[1].get<int32_t>();
    EXPECT_EQ(tok.token_to_id(content), id) << content;
    EXPECT_EQ(tok.is_special(id), added[2].get<bool>()) << content;
  }

  size_t n_cases = 0, n_failed = 0, n_text = 0, n_decode = 0;
  auto report = [&](const std::string& what, const std::string& detail) {
    if (++n_failed <= 12)
      ADD_FAILURE() << name << " case " << n_cases << ": " << what << "\n" << detail;
  };
  while (std::getline(lines, line)) {
    ++n_cases;
    const Json c = Json::parse(line);
    std::vector<int32_t> ids_for_decode;
    if (c.contains("text")) {
      ++n_text;
      const auto text = c.at("text").get<std::string>();
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      const auto ids_special = c.at("ids_special").get<std::vector<int32_t>>();
      const auto got = tok.encode(text, false);
      if (got != ids)
        report("encode", "text " + Json(text).dump() + "\n  want " + show_ids(ids) + "\n  got  " +
                             show_ids(got));
      const auto got_special = tok.encode(text, true);
      if (got_special != ids_special)
        report("encode(add_special_tokens)", "text " + Json(text).dump() + "\n  want " +
                                                 show_ids(ids_special) + "\n  got  " +
                                                 show_ids(got_special));
      ids_for_decode = ids_special;
    } else {
      ++n_decode;
      ids_for_decode = c.at("decode_ids").get<std::vector<int32_t>>();
    }
    for (const bool skip : {false, true}) {
      const auto want = c.at(skip ? "decoded_skip" : "decoded").get<std::string>();
      const std::string got = tok.decode(ids_for_decode, skip);
      const std::string where = std::string(skip ? " (skip_special_tokens)" : "") + " ids " +
                                show_ids(ids_for_decode) + "\n  want " + Json(want).dump();
      if (got != want) report("decode" + where, "  got  " + Json(got).dump());
      bool pieces_valid = true;
      const std::string streamed = stream_decode(tok, ids_for_decode, skip, pieces_valid);
      if (streamed != want) report("IncrementalDecoder" + where, "  got  " + Json(streamed).dump());
      if (!pieces_valid) report("IncrementalDecoder returned invalid UTF-8" + where, "");
    }
  }
  EXPECT_EQ(n_text, meta.at("n_text_cases").get<size_t>());
  EXPECT_EQ(n_decode, meta.at("n_decode_cases").get<size_t>());
  EXPECT_EQ(n_failed, 0u);
  std::printf(
      "[tokenizer parity] %s: %zu cases checked (%zu text: encode x2 + decode x2 + stream "
      "x2; %zu id sequences: decode x2 + stream x2), %zu failed; load %.2f s "
      "(tokenizers %s)\n",
      name.c_str(), n_cases, n_text, n_decode, n_failed, load_s,
      meta.at("tokenizers_version").get<std::string>().c_str());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerParity,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "deepseek_v3", "llama2",
                                           "gemma3"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dspark
