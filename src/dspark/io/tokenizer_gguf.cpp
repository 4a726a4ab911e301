// A GGUF file's tokenizer (tokenizer.ggml.*) as the equivalent Hugging Face tokenizer.json, so the
// one tokenizer implementation (tokenizer*.cpp) serves both formats:
//   "gpt2"   byte-level BPE: tokens + merges; the pre-tokenizer chosen by tokenizer.ggml.pre
//            (default/gpt2, smollm, llama-bpe/llama3, qwen2 — the regexes of the original
//            tokenizer.json files); ByteLevel decoder.
//   "llama"  SentencePiece BPE: tokens + scores, merges derived from the scores as transformers'
//            converter does (every split of a token into two vocabulary pieces, ranked by the
//            token's score), "▁" for spaces, byte fallback (<0xXX> tokens).
// CONTROL / UNKNOWN tokens become special added tokens, USER_DEFINED ones non-special added
// tokens. add_bos / add_eos become a TemplateProcessing post-processor.
#include <algorithm>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/gguf.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/io/json_util.h"
#include "dspark/io/tokenizer.h"
#include "dspark/io/utf8.h"

namespace dspark {
namespace {

using Json = nlohmann::json;

enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

Json split_isolated(const char* regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// The pre-tokenizer of a byte-level BPE file, from tokenizer.ggml.pre.
Json gpt2_pre_tokenizer(const std::string& pre, const std::string& where) {
  if (pre == "default" || pre == "gpt2" || pre.empty()) return byte_level(true);
  if (pre == "smollm") {
    // SmolLM / SmolLM2 tokenizer.json: each digit split off, then GPT-2's byte-level regex.
    return {{"type", "Sequence"},
            {"pretokenizers",
             Json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    return {{"type", "Sequence"},
            {"pretokenizers", Json::array({split_isolated(kLlama3Regex), byte_level(false)})}};
  }
  if (pre == "qwen2") {
    return {{"type", "Sequence"},
            {"pretokenizers", Json::array({split_isolated(kQwen2Regex), byte_level(false)})}};
  }
  DSPARK_FAIL(unsupported,
              "{}: tokenizer.ggml.pre '{}' is not supported (supported: default, gpt2, smollm, "
              "llama-bpe, qwen2)",
              where, pre);
}

// transformers' SentencePiece merge extraction: for each vocabulary piece (in id order), every
// split into two pieces that are both in the vocabulary (at character boundaries), ordered by the
// ids of the two halves; then all merges stably sorted by the piece's score, highest first.
Json spm_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                const std::unordered_map<std::string, int64_t>& ids) {
  struct Merge {
    int64_t left, right;
    double score;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& piece = tokens[t];
    local.clear();
    size_t pos = 0;
    while (pos < piece.size()) {
      pos += std::max<size_t>(1, utf8::sequence_length(static_cast<unsigned char>(piece[pos])));
      if (pos >= piece.size()) break;
      const auto l = ids.find(piece.substr(0, pos));
      const auto r = ids.find(piece.substr(pos));
      if (l != ids.end() && r != ids.end()) local.push_back({l->second, r->second, scores[t]});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  Json out = Json::array();
  for (const Merge& m : merges) {
    out.push_back(
        Json::array({tokens[static_cast<size_t>(m.left)], tokens[static_cast<size_t>(m.right)]}));
  }
  return out;
}

Json template_processor(const std::vector<std::string>& tokens, int64_t bos, int64_t eos) {
  Json single = Json::array();
  Json special = Json::object();
  auto add_special = [&](int64_t id) {
    const std::string& s = tokens[static_cast<size_t>(id)];
    single.push_back({{"SpecialToken", {{"id", s}, {"type_id", 0}}}});
    special[s] = {{"id", s}, {"ids", Json::array({id})}, {"tokens", Json::array({s})}};
  };
  if (bos >= 0) add_special(bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos >= 0) add_special(eos);
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", special}};
}

}  // namespace

GgufTokenizerSpec gguf_tokenizer_json(const GgufFile& file) {
  const std::string where = file.path().string();
  const std::string model = file.get_string("tokenizer.ggml.model");
  DSPARK_CHECK_KIND(unsupported, model == "gpt2" || model == "llama",
                    "{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)",
                    where, model);
  const std::vector<std::string>& tokens =
      file.get("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  DSPARK_CHECK_KIND(io, !tokens.empty(), "{}: tokenizer.ggml.tokens is empty", where);
  const auto n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (const GgufValue* tt = file.find("tokenizer.ggml.token_type")) {
    types = tt->as_ints("tokenizer.ggml.token_type");
    DSPARK_CHECK_KIND(io, static_cast<int64_t>(types.size()) == n,
                      "{}: {} token types for {} tokens", where, types.size(), n);
  }
  auto token_id = [&](const char* key) -> int64_t {
    const std::optional<int64_t> id = file.find_int(key);
    if (!id) return -1;
    DSPARK_CHECK_KIND(io, *id >= 0 && *id < n, "{}: {} = {} is outside the vocabulary (size {})",
                      where, key, *id, n);
    return *id;
  };
  GgufTokenizerSpec spec;
  spec.bos = static_cast<int32_t>(token_id("tokenizer.ggml.bos_token_id"));
  spec.eos = static_cast<int32_t>(token_id("tokenizer.ggml.eos_token_id"));
  const int64_t unk = token_id("tokenizer.ggml.unknown_token_id");
  const bool spm = model == "llama";
  const bool add_bos = file.find_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  const bool add_eos = file.find_bool("tokenizer.ggml.add_eos_token").value_or(false);

  // Vocabulary (a repeated token string keeps its first id, as a dict built in id order would
  // keep the last: both ids decode to the same text; encoding picks the first).
  std::unordered_map<std::string, int64_t> ids;
  ids.reserve(tokens.size());
  Json vocab = Json::object();
  for (int64_t i = 0; i < n; ++i) {
    if (ids.emplace(tokens[static_cast<size_t>(i)], i).second)
      vocab[tokens[static_cast<size_t>(i)]] = i;
  }
  Json added = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t type = types[static_cast<size_t>(i)];
    if (type != kControl && type != kUserDefined && type != kUnknown) continue;
    added.push_back({{"id", i},
                     {"content", tokens[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != kUserDefined}});
  }

  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  Json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"ignore_merges", false}};
  if (!spm) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] =
        gpt2_pre_tokenizer(file.find_string("tokenizer.ggml.pre").value_or("default"), where);
    j["decoder"] = byte_level(true);
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    const GgufValue* merges = file.find("tokenizer.ggml.merges");
    DSPARK_CHECK_KIND(io, merges != nullptr, "{}: a gpt2 tokenizer without tokenizer.ggml.merges",
                      where);
    bpe["merges"] = merges->as_strings("tokenizer.ggml.merges");
  } else {
    const bool add_space_prefix = file.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    Json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    j["normalizer"] =
        add_space_prefix
            ? Json{{"type", "Sequence"},
                   {"normalizers",
                    Json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace})}}
            : replace;
    j["pre_tokenizer"] = nullptr;
    Json decoders =
        Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}});
    if (add_space_prefix) {
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    std::vector<double> scores(tokens.size(), 0.0);
    if (const GgufValue* s = file.find("tokenizer.ggml.scores")) {
      scores = s->as_doubles("tokenizer.ggml.scores");
      DSPARK_CHECK_KIND(io, static_cast<int64_t>(scores.size()) == n, "{}: {} scores for {} tokens",
                        where, scores.size(), n);
    }
    bpe["unk_token"] = unk >= 0 ? Json(tokens[static_cast<size_t>(unk)]) : Json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] =
        std::find(types.begin(), types.end(), static_cast<int64_t>(kByte)) != types.end();
    bpe["merges"] = spm_merges(tokens, scores, ids);
  }
  bpe["vocab"] = std::move(vocab);
  j["model"] = std::move(bpe);
  j["post_processor"] = add_bos || add_eos ? template_processor(tokens, add_bos ? spec.bos : -1,
                                                                add_eos ? spec.eos : -1)
                                           : Json(nullptr);
  DSPARK_CHECK_KIND(io, !(add_bos && spec.bos < 0),
                    "{}: tokenizer.ggml.add_bos_token is set but there is no bos_token_id", where);
  DSPARK_CHECK_KIND(io, !(add_eos && spec.eos < 0),
                    "{}: tokenizer.ggml.add_eos_token is set but there is no eos_token_id", where);
  spec.json = j.dump();
  return spec;
}

std::string gguf_chat_template(const GgufFile& file) {
  return file.find_string("tokenizer.chat_template").value_or("");
}

std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    const std::filesystem::path& dir, int vocab_size) {
  const std::filesystem::path file = dir / "tokenizer.json";
  const Json tok = read_json_file(file);
  const Json& model = tok.at("model");
  DSPARK_CHECK_KIND(unsupported,
                    model.value("type", "") == "BPE" && !model.value("byte_fallback", false),
                    "{}: only byte-level BPE tokenizers can be written to GGUF (this one is {})",
                    file.string(), model.value("type", "?"));
  std::string pre;
  for (const char* name : {"default", "smollm", "llama-bpe", "qwen2"}) {
    if (tok.contains("pre_tokenizer") && gpt2_pre_tokenizer(name, "") == tok["pre_tokenizer"]) {
      pre = name;
      break;
    }
  }
  DSPARK_CHECK_KIND(unsupported, !pre.empty(),
                    "{}: its pre-tokenizer matches none GGUF can name (supported: gpt2's, "
                    "smollm's, llama-bpe's, qwen2's)",
                    file.string());

  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int64_t> types(tokens.size(), kUnused);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  auto put = [&](const std::string& text, int64_t id, int64_t type) {
    DSPARK_CHECK_KIND(io, id >= 0 && id < vocab_size,
                      "{}: token '{}' has id {}, outside the model's vocabulary of {}",
                      file.string(), text, id, vocab_size);
    tokens[static_cast<size_t>(id)] = text;
    types[static_cast<size_t>(id)] = type;
  };
  for (const auto& [text, id] : model.at("vocab").items()) put(text, id.get<int64_t>(), kNormal);
  for (const Json& t : tok.value("added_tokens", Json::array()))
    put(t.at("content").get<std::string>(), t.at("id").get<int64_t>(),
        t.value("special", false) ? kControl : kUserDefined);
  std::vector<std::string> merges;
  for (const Json& m : model.at("merges")) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  }

  std::vector<std::pair<std::string, GgufValue>> out = {
      {"tokenizer.ggml.model", gguf_string("gpt2")},
      {"tokenizer.ggml.pre", gguf_string(pre)},
      {"tokenizer.ggml.tokens", gguf_strings(std::move(tokens))},
      {"tokenizer.ggml.token_type", gguf_i32s(std::move(types))},
      {"tokenizer.ggml.merges", gguf_strings(std::move(merges))}};
  // BOS as the tokenizer's own post-processor adds it.
  const Tokenizer t = Tokenizer::from_file(dir);
  const std::vector<int32_t> plain = t.encode("a"), special = t.encode("a", true);
  const bool add_bos = special.size() > plain.size() && special.back() == plain.back() &&
                       std::equal(plain.begin(), plain.end(), special.end() - plain.size());
  if (add_bos) out.emplace_back("tokenizer.ggml.bos_token_id", gguf_u32(special.front()));
  out.emplace_back("tokenizer.ggml.add_bos_token", gguf_bool(add_bos));
  const std::filesystem::path config = dir / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    const Json c = read_json_file(config);
    if (const auto it = c.find("chat_template"); it != c.end() && it->is_string())
      out.emplace_back("tokenizer.chat_template", gguf_string(it->get<std::string>()));
  }
  return out;
}

}  // namespace dspark
