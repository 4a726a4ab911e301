// Tokenizer building blocks and failure modes, with expectations derived from the Unicode
// standard and the tokenizer.json format rather than from our own outputs:
//  - UTF-8: lossy decoding replaces maximal invalid subparts (Unicode 15, section 3.9, Table 3-8)
//  - NFC: canonical composition/decomposition examples from UAX #15
//  - the Oniguruma -> PCRE2 regex translation
//  - IncrementalDecoder never emits half a character, on tiny hand-built tokenizers
//  - load errors: missing file, truncated JSON / .xz, unknown types, broken vocabularies
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <fstream>
#include <thread>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/tokenizer.h"
#include "dspark/io/tokenizer_regex.h"
#include "dspark/io/tokenizer_unicode.h"
#include "dspark/io/utf8.h"
#include "dspark/io/xz.h"

namespace dspark {
namespace {

using Json = nlohmann::json;

// ---- UTF-8 ----------------------------------------------------------------------------------

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  // The Unicode standard's example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 decodes to
  // a, U+FFFD (F1 80 80), U+FFFD (E1 80), U+FFFD (C2), b, U+FFFD (80), c, U+FFFD, U+FFFD, d.
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r(utf8::kReplacementUtf8);
  const std::string want = "a" + r + r + r + "b" + r + "c" + r + r + "d";
  EXPECT_EQ(utf8::to_valid_lossy(bytes), want);
  // Surrogates (ED A0 80) and overlongs (C0 80, E0 80 80) are invalid byte by byte.
  EXPECT_EQ(utf8::to_valid_lossy("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(utf8::to_valid_lossy("\xC0\x80"), r + r);
  EXPECT_EQ(utf8::to_valid_lossy("\xE0\x80\x80"), r + r + r);
  // A truncated sequence at the end is one replacement.
  EXPECT_EQ(utf8::to_valid_lossy("x\xF0\x9F\x98"), "x" + r);
  EXPECT_EQ(utf8::to_valid_lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(TokenizerUtf8, StreamingEqualsOneShotAtEverySplit) {
  const std::string bytes = "a\xE4\xBD\xA0\xF0\x9F\x98\x80\xE1\x80\xC2z\xF4\x90\x80\x80\xE4\xBD";
  const std::string whole = utf8::to_valid_lossy(bytes);
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    utf8::LossyDecoder decoder;
    std::string first, second;
    decoder.push(std::string_view(bytes).substr(0, cut), first);
    decoder.push(std::string_view(bytes).substr(cut), second);
    decoder.flush(second);
    EXPECT_EQ(first + second, whole) << cut;
    EXPECT_EQ(utf8::find_invalid(first), std::string::npos) << cut;
  }
}

// ---- normalization ----------------------------------------------------------------------------

TEST(TokenizerUnicode, CanonicalCompositionExamples) {
  EXPECT_EQ(unicode::nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(unicode::nfd("\u00e9"), "e\u0301");
  EXPECT_EQ(unicode::nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
  EXPECT_EQ(unicode::nfd("\uac01"), "\u1100\u1161\u11a8");
  EXPECT_EQ(unicode::nfc("\u212b"), "\u00c5");        // singleton: ANGSTROM SIGN
  EXPECT_EQ(unicode::nfc("\u0958"), "\u0915\u093c");  // composition exclusion
  // Canonical ordering: dot below (220) before circumflex (230), then composition.
  EXPECT_EQ(unicode::nfc("a\u0302\u0323"), "\u1ead");
  EXPECT_EQ(unicode::nfc("a\u0323\u0302"), "\u1ead");
  // Blocked: a second acute (same class) cannot compose after the first has.
  EXPECT_EQ(unicode::nfc("e\u0301\u0301"), "\u00e9\u0301");
  EXPECT_EQ(unicode::nfc("plain ascii"), "plain ascii");
  // Unicode 13 addition left alone, as the reference (Unicode 9.0 data) does.
  EXPECT_EQ(unicode::nfc("\U00011935\U00011930"), "\U00011935\U00011930");
}

// ---- regex translation ------------------------------------------------------------------------

std::vector<std::pair<size_t, size_t>> matches(const Regex& re, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  re.find_all(text, out);
  return out;
}

TEST(TokenizerRegex, OnigurumaSemantics) {
  EXPECT_EQ(translate_onig_pattern("\\s+(?!\\S)"),
            "[\\t-\\r\\x{85}\\p{Z}]+(?![^\\t-\\r\\x{85}\\p{Z}])");
  EXPECT_EQ(translate_onig_pattern("[^\\s\\p{Zs}]"), "[^\\t-\\r\\x{85}\\p{Z}\\p{Zs}]");
  EXPECT_EQ(translate_onig_pattern("\\u4e00x"), "\\x{4e00}x");
  // U+180E is not a space for Oniguruma (it is Cf since Unicode 6.3); U+0085 and U+3000 are.
  const Regex space = Regex::compile("\\s");
  EXPECT_TRUE(matches(space, "\u180e").empty());
  EXPECT_EQ(matches(space, "\u0085").size(), 1u);
  EXPECT_EQ(matches(space, "\u3000").size(), 1u);
  // U+1FA75 (LIGHT BLUE HEART, Unicode 15) is a symbol; U+1C89 (Unicode 16) a letter.
  EXPECT_EQ(matches(Regex::compile("\\p{S}"), "\U0001FA75").size(), 1u);
  EXPECT_EQ(matches(Regex::compile("[\\p{L}]"), "\u1c89").size(), 1u);
  // Ruby's \h is a hex digit.
  EXPECT_EQ(matches(Regex::compile("\\h+"), "zzBEEFzz"),
            (std::vector<std::pair<size_t, size_t>>{{2, 6}}));
  // Case-insensitive contractions match the long s, as Unicode case folding says.
  EXPECT_EQ(matches(Regex::compile("(?i:'s)"), "'\u017f").size(), 1u);
  // Empty matches: one per position, none right after a previous match.
  EXPECT_EQ(matches(Regex::compile("a*"), "baa"),
            (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}}));
  EXPECT_THROW(Regex::compile("(unclosed"), Error);
}

// ---- tiny hand-built tokenizers ---------------------------------------------------------------

// The GPT-2 byte alphabet, written out from its definition: printable Latin-1 bytes stand for
// themselves, the others take U+0100 onwards in byte order.
std::string byte_char(int b) {
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int next = 256;
  for (int x = 0; x < b; ++x) {
    const bool p = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
    if (!p) ++next;
  }
  std::string out;
  utf8::append(out, static_cast<char32_t>(printable ? b : next));
  return out;
}

Json byte_level_tokenizer() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab[byte_char(' ') + "a"] = 256;
  return Json{
      {"version", "1.0"},
      {"added_tokens",
       Json::array(
           {Json{{"id", 257}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array({byte_char(' ') + " a"})}}}};
}

TEST(TokenizerTiny, ByteLevelEncodeAndStream) {
  const Tokenizer tok = Tokenizer::from_json(byte_level_tokenizer().dump(), "tiny");
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.encode("a a"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(tok.encode("a<|end|>"), (std::vector<int32_t>{'a', 257}));
  EXPECT_TRUE(tok.is_special(257));
  EXPECT_FALSE(tok.is_special(256));
  EXPECT_EQ(tok.id_to_token(256), byte_char(' ') + "a");
  EXPECT_EQ(tok.token_to_id("<|end|>"), 257);
  EXPECT_EQ(tok.token_to_id("nope"), -1);
  EXPECT_EQ(tok.id_to_token(9999), "");
  // U+4F60 is E4 BD A0: nothing comes out until the character is complete.
  const std::vector<int32_t> ids = tok.encode("\u4f60!");
  ASSERT_EQ(ids, (std::vector<int32_t>{0xE4, 0xBD, 0xA0, '!'}));
  IncrementalDecoder decoder(tok);
  EXPECT_EQ(decoder.feed(0xE4), "");
  EXPECT_EQ(decoder.feed(0xBD), "");
  EXPECT_EQ(decoder.feed(0xA0), "\u4f60");
  EXPECT_EQ(decoder.feed('!'), "!");
  EXPECT_EQ(decoder.feed(0xE4), "");
  EXPECT_EQ(decoder.flush(), utf8::kReplacementUtf8);  // the stream ended inside a character
  EXPECT_EQ(decoder.feed('a'), "a");                   // a new stream after flush()
  EXPECT_EQ(decoder.flush(), "");
  const std::vector<int32_t> with_end = {'a', 257, 256};
  EXPECT_EQ(tok.decode(with_end), "a<|end|> a");
  EXPECT_EQ(tok.decode(with_end, true), "a a");
  EXPECT_THROW(tok.encode("bad \xFF utf8"), Error);
  try {
    tok.encode("\xC3");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
  }
}

// Concurrent encode/decode on one tokenizer (the word cache is shared) agrees with serial results.
TEST(TokenizerTiny, ConcurrentUse) {
  const Tokenizer tok = Tokenizer::from_json(byte_level_tokenizer().dump(), "tiny");
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back(fmt::format("a a {} \u4f60 a<|end|>{}", i, i * 7919));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 200; ++rep) {
        const size_t i = static_cast<size_t>((rep * 7 + w * 13) % 64);
        if (tok.encode(texts[i]) != want[i] || tok.decode(want[i]) != texts[i]) ++mismatches[w];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// SentencePiece style: byte fallback runs are held until a non-byte token or flush().
TEST(TokenizerTiny, ByteFallbackStreamsWholeCharacters) {
  Json vocab = {{"<unk>", 0}, {"\u2581a", 1}, {"a", 2}, {"\u2581", 3}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 4 + b;
  const Json json = {
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         Json::array(
             {{{"type", "Prepend"}, {"prepend", "\u2581"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", Json::array({"\u2581 a"})}}}};
  const Tokenizer tok = Tokenizer::from_json(json.dump(), "tiny-spm");
  const std::vector<int32_t> ids = tok.encode("a \u4f60a");
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 3, 4 + 0xE4, 4 + 0xBD, 4 + 0xA0, 2}));
  EXPECT_EQ(tok.decode(ids), "a \u4f60a");  // leading space stripped once
  IncrementalDecoder decoder(tok);
  std::vector<std::string> pieces;
  for (const int32_t id : ids) pieces.push_back(decoder.feed(id));
  pieces.push_back(decoder.flush());
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", " ", "", "", "", "\u4f60a", ""}));
  // An incomplete run becomes one U+FFFD per byte, as tokenizers' ByteFallback does.
  const std::vector<int32_t> partial = {4 + 0xE4, 4 + 0xBD};
  const std::string r(utf8::kReplacementUtf8);
  EXPECT_EQ(tok.decode(partial), r + r);
}

// Strip with trailing characters (the reference panics on an empty string with stop > 0, so the
// golden cases cannot cover it): "a" + three spaces, fused, loses two trailing spaces.
TEST(TokenizerTiny, StripTrailingStreams) {
  const Json json = {
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         Json::array({{{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 0}, {"stop", 2}}})}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {" ", 1}}}, {"merges", Json::array()}}}};
  const Tokenizer tok = Tokenizer::from_json(json.dump(), "tiny-strip");
  for (const auto& [ids, want] : std::vector<std::pair<std::vector<int32_t>, std::string>>{
           {{0, 1, 1, 1}, "a "}, {{0, 1}, "a"}, {{1, 0, 1, 1, 0, 1}, " a  a"}, {{0}, "a"}}) {
    EXPECT_EQ(tok.decode(ids), want);
    IncrementalDecoder decoder(tok);
    std::string streamed;
    for (const int32_t id : ids) streamed += decoder.feed(id);
    EXPECT_EQ(streamed + decoder.flush(), want);
  }
}

// ---- load errors ------------------------------------------------------------------------------

template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no dspark::Error thrown";
  return Error(ErrorKind::internal, "none");
}

std::filesystem::path temp_file(const std::string& name, const std::string& bytes) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("dspark_tokenizer_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(TokenizerErrors, MissingFile) {
  const Error e = expect_error([] { Tokenizer::from_file("/nonexistent/dir/tokenizer.json"); });
  EXPECT_EQ(e.kind(), ErrorKind::io);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos)
      << e.what();
}

TEST(TokenizerErrors, TruncatedJson) {
  const std::string json = byte_level_tokenizer().dump();
  const Error e =
      expect_error([&] { Tokenizer::from_json(json.substr(0, json.size() / 2), "half.json"); });
  EXPECT_EQ(e.kind(), ErrorKind::io);
  EXPECT_NE(std::string(e.what()).find("half.json"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
}

TEST(TokenizerErrors, TruncatedXz) {
  std::ifstream in(test::data_dir() / "tokenizers" / "llama2" / "tokenizer.json.xz",
                   std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  const auto path = temp_file("truncated.json.xz", bytes.substr(0, bytes.size() / 3));
  const Error e = expect_error([&] { Tokenizer::from_file(path); });
  std::filesystem::remove(path);
  EXPECT_EQ(e.kind(), ErrorKind::io);
  EXPECT_NE(std::string(e.what()).find("truncated.json.xz"), std::string::npos) << e.what();
  const auto not_xz = temp_file("plain.json.xz", "{\"not\": \"xz\"}");
  EXPECT_EQ(expect_error([&] { Tokenizer::from_file(not_xz); }).kind(), ErrorKind::io);
  std::filesystem::remove(not_xz);
}

TEST(TokenizerErrors, UnsupportedTypes) {
  auto kind_and_message = [](const Json& json) {
    const Error e = expect_error([&] { Tokenizer::from_json(json.dump(), "t.json"); });
    return std::pair{e.kind(), std::string(e.what())};
  };
  Json unigram = byte_level_tokenizer();
  unigram["model"] = {{"type", "Unigram"}, {"vocab", Json::array()}};
  auto [kind, message] = kind_and_message(unigram);
  EXPECT_EQ(kind, ErrorKind::unsupported);
  EXPECT_NE(message.find("Unigram"), std::string::npos) << message;
  EXPECT_NE(message.find("t.json"), std::string::npos) << message;

  Json bert = byte_level_tokenizer();
  bert["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  std::tie(kind, message) = kind_and_message(bert);
  EXPECT_EQ(kind, ErrorKind::unsupported);
  EXPECT_NE(message.find("BertPreTokenizer"), std::string::npos) << message;

  Json lowercase = byte_level_tokenizer();
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(kind_and_message(lowercase).first, ErrorKind::unsupported);

  Json wordpiece_decoder = byte_level_tokenizer();
  wordpiece_decoder["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  EXPECT_EQ(kind_and_message(wordpiece_decoder).first, ErrorKind::unsupported);

  Json roberta = byte_level_tokenizer();
  roberta["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_EQ(kind_and_message(roberta).first, ErrorKind::unsupported);
}

TEST(TokenizerErrors, BrokenContents) {
  auto error_of = [](const Json& json) {
    return expect_error([&] { Tokenizer::from_json(json.dump(), "t.json"); });
  };
  Json bad_merge = byte_level_tokenizer();
  bad_merge["model"]["merges"].push_back("x nope");
  Error e = error_of(bad_merge);
  EXPECT_EQ(e.kind(), ErrorKind::io);
  EXPECT_NE(std::string(e.what()).find("'nope' is not in the vocabulary"), std::string::npos)
      << e.what();

  Json no_model = byte_level_tokenizer();
  no_model.erase("model");
  e = error_of(no_model);
  EXPECT_EQ(e.kind(), ErrorKind::io);
  EXPECT_NE(std::string(e.what()).find("model"), std::string::npos) << e.what();

  Json bad_regex = byte_level_tokenizer();
  bad_regex["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}};
  EXPECT_EQ(error_of(bad_regex).kind(), ErrorKind::io);

  Json bad_type = byte_level_tokenizer();
  bad_type["model"]["vocab"] = Json::array({1, 2});
  EXPECT_EQ(error_of(bad_type).kind(), ErrorKind::io);

  EXPECT_EQ(expect_error([] { Tokenizer::from_json("[1, 2]", "t.json"); }).kind(), ErrorKind::io);
  EXPECT_EQ(expect_error([] { Tokenizer::from_json("", "t.json"); }).kind(), ErrorKind::io);
}

TEST(TokenizerFiles, DirectoryAndConfigTokens) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dspark_tokenizer_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Json json = byte_level_tokenizer();
  json["added_tokens"].push_back(
      Json{{"id", 258}, {"content", "<|go|>"}, {"special", true}, {"normalized", false}});
  std::ofstream(dir / "tokenizer.json") << json.dump();
  EXPECT_EQ(Tokenizer::from_file(dir).bos_id(), -1);
  EXPECT_EQ(Tokenizer::from_file(dir).eos_id(), -1);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<|go|>", "eos_token": {"content": "<|end|>"}})";
  const Tokenizer tok = Tokenizer::from_file(dir);
  EXPECT_EQ(tok.bos_id(), 258);
  EXPECT_EQ(tok.eos_id(), 257);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dspark
