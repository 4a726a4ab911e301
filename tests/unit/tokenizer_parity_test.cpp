// Exact parity with the Hugging Face `tokenizers` library on six published tokenizers: every case
// of tests/data/tokenizers/<name>/cases.jsonl.xz (written by tools/tokenizer_goldens.py) must
// match -- encode with and without special tokens, decode with and without skipping special
// tokens, and IncrementalDecoder (whose pieces must each be valid UTF-8) against decode.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <random>
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

// Variants patch a base tokenizer.json (see tools/tokenizer_goldens.py: apply_patch).
Tokenizer load_variant(const std::string& name, const Json& meta) {
  Json json = Json::parse(
      read_file_maybe_xz(tokenizer_dir(meta.at("base").get<std::string>()) / "tokenizer.json.xz"));
  const Json& patch = meta.at("patch");
  if (patch.contains("sections"))
    for (const auto& [key, value] : patch.at("sections").items()) json[key] = value;
  if (patch.contains("model"))
    for (const auto& [key, value] : patch.at("model").items()) json["model"][key] = value;
  if (patch.contains("added_tokens"))
    for (const Json& token : patch.at("added_tokens")) json["added_tokens"].push_back(token);
  return Tokenizer::from_json(json.dump(), name);
}

// BOS/EOS read off each tokenizer.json: the post-processor template's first special token
// (Llama 2/3.1, Gemma 3), else the family's well-known begin/end tokens among the added tokens.
const std::map<std::string, std::pair<int32_t, int32_t>> kBosEos = {
    {"qwen3", {-1, 151643}}, {"llama3", {128000, 128001}}, {"llama3_1", {128000, 128001}},
    {"deepseek_v3", {0, 1}}, {"llama2", {1, 2}},           {"gemma3", {2, 1}},
};

// Encode speed on ~2k-token prompts cut from `document` (realistic text, the word cache warm
// from the cases) and on random words (every word a cache miss: the BPE merge loop itself).
void report_speed(const Tokenizer& tok, const std::string& name, const std::string& document) {
  std::mt19937 rng(7);
  std::string random_words;
  while (random_words.size() < document.size()) {
    const int n = 2 + static_cast<int>(rng() % 9);
    random_words += (rng() % 5 == 0) ? ". " : " ";
    for (int i = 0; i < n; ++i) random_words += static_cast<char>('a' + rng() % 26);
  }
  for (const auto& [kind, text] :
       {std::pair{"case texts", &document}, {"random words", &random_words}}) {
    // A prefix of about 2,000 tokens.
    size_t bytes = 12000;
    auto prefix = [&](size_t n) {
      while (n > 0 && (static_cast<unsigned char>((*text)[n]) & 0xC0) == 0x80) --n;
      return std::string_view(*text).substr(0, n);
    };
    while (tok.encode(prefix(bytes)).size() > 2000 && bytes > 1000) bytes -= 250;
    const std::string_view prompt = prefix(bytes);
    const auto t0 = std::chrono::steady_clock::now();
    size_t n_tokens = 0;
    int reps = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300)) {
      n_tokens += tok.encode(prompt).size();
      ++reps;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ms_per_prompt = 1e3 * s / reps;
    std::printf("[tokenizer speed] %s, %s: %.2f ms per %zu-token prompt (%.2f M tokens/s)\n",
                name.c_str(), kind, ms_per_prompt, n_tokens / reps, n_tokens / s / 1e6);
    // ~1 ms in a Release build; the bound only catches algorithmic regressions (and sanitizers).
    EXPECT_LT(ms_per_prompt, 100.0) << "encoding a 2k-token prompt should take well under 10 ms";
  }
  // Whole-document throughput (long text, one call).
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = tok.encode(document).size();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[tokenizer speed] %s, %zu-byte document: %zu tokens in %.1f ms (%.2f M tokens/s)\n",
              name.c_str(), document.size(), n, s * 1e3, n / s / 1e6);
}

class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, MatchesHuggingFace) {
  const std::string name = GetParam();
  const auto dir = tokenizer_dir(name);
  std::istringstream lines(read_file_maybe_xz(dir / "cases.jsonl.xz"));
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const Json header = Json::parse(line);
  const Json& meta = header.at("meta");
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = meta.at("patch").is_null() ? Tokenizer::from_file(dir / "tokenizer.json.xz")
                                                   : load_variant(name, meta);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  std::string document;  // the case texts, for the speed measurement below
  while (std::getline(lines, line)) {
    ++n_cases;
    const Json c = Json::parse(line);
    if (c.contains("text") && document.size() < 400000) document += c.at("text").get<std::string>();
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
  if (const auto it = kBosEos.find(name); it != kBosEos.end()) {
    EXPECT_EQ(tok.bos_id(), it->second.first);
    EXPECT_EQ(tok.eos_id(), it->second.second);
  }
  report_speed(tok, name, document);
  std::printf(
      "[tokenizer parity] %s: %zu cases checked (%zu text: encode x2 + decode x2 + stream "
      "x2; %zu id sequences: decode x2 + stream x2), %zu failed; load %.2f s "
      "(tokenizers %s)\n",
      name.c_str(), n_cases, n_text, n_decode, n_failed, load_s,
      meta.at("tokenizers_version").get<std::string>().c_str());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerParity,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "deepseek_v3", "llama2",
                                           "gemma3", "llama2_metaspace", "qwen3_variants",
                                           "llama2_plain", "llama2_fused", "bpe_affixes"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace dspark
