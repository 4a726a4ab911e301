// Internal building blocks of dspark::Tokenizer (not a public contract): one class per
// tokenizer.json component, built from its JSON section.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dspark/io/tokenizer.h"
#include "dspark/io/tokenizer_regex.h"

namespace dspark::tokenizer_detail {

using Json = nlohmann::json;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// JSON helpers that fail with ErrorKind::io naming the field.
const Json& field(const Json& object, const char* name, const char* where);
std::string string_field(const Json& object, const char* name, const char* where);
bool bool_field(const Json& object, const char* name, bool fallback);

// The GPT-2 byte <-> printable character mapping of ByteLevel.
const std::array<std::string, 256>& byte_level_chars();  // byte -> UTF-8 of its character
int byte_level_byte(char32_t cp);                        // character -> byte, or -1

// A "Split" pattern: {"String": "..."} (literal) or {"Regex": "..."}.
Regex pattern_from_json(const Json& pattern, const char* where);

// "Replace" (normalizer and decoder): every non-overlapping match, leftmost first, of a literal
// or a regex is replaced by `content`.
struct Replacement {
  static Replacement from_json(const Json& json, const char* where);
  std::string apply(std::string text) const;
  bool is_literal = true;
  std::string literal;
  std::shared_ptr<const Regex> regex;
  std::string content;
};

// ---- normalizers -------------------------------------------------------------------------------
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};
// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const Json& json);

// ---- pre-tokenizers ----------------------------------------------------------------------------
struct Piece {
  std::string text;
  bool at_start = false;  // starts at offset 0 of the original text (Metaspace "first")
};
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty pieces are dropped).
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& json);

// ---- tokenizer.json ----------------------------------------------------------------------------
// A parsed tokenizer.json: model.vocab and model.merges are taken out of the document.
struct TokenizerJson {
  Json document;
  bool has_vocab = false;
  std::vector<std::pair<std::string, int32_t>> vocab;
  bool has_merges = false;
  std::vector<std::pair<std::string, std::string>> merges;
};
// Throws ErrorKind::io for invalid JSON or a malformed vocab/merges.
TokenizerJson parse_tokenizer_json(std::string_view text);

// ---- the BPE model -----------------------------------------------------------------------------
class BpeModel {
 public:
  // `model`: the "model" section (without vocab/merges, which come from `data` and are consumed).
  BpeModel(const Json& model, TokenizerJson& data);
  BpeModel(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string* id_to_token(int32_t id) const;   // nullptr if absent
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }  // number of tokens

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  struct PairMap;
  struct Cache;
  // Vocabulary: tokens_[k] has id token_ids_[k]; an open-addressing index over k; id -> k.
  std::vector<std::string> tokens_;
  std::vector<int32_t> token_ids_;
  std::vector<uint64_t> index_;  // (hash >> 32) << 32 | (k + 1), 0 = empty
  uint64_t index_mask_ = 0;
  std::vector<int32_t> id_to_token_;  // -1 where an id is unused
  std::unique_ptr<PairMap> merges_;
  std::unique_ptr<Cache> cache_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> token ids (-1 if absent)
};

// ---- added tokens ------------------------------------------------------------------------------
struct AddedToken {
  std::string content;  // what is matched (the normalized form for normalized tokens)
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct Segment {
  size_t start = 0;
  size_t end = 0;
  int32_t id = -1;  // an added token, or -1 for text
};

// Leftmost-longest matching of a set of added tokens (a byte trie), with the tokenizers rules.
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into text segments and added-token segments covering it.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  // Longest token starting at `pos` (index into tokens_), or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  std::vector<AddedToken> tokens_;
  std::vector<int32_t> node_token_{-1};          // per trie node: token index or -1
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> node
  std::array<bool, 256> first_byte_{};
};

// ---- post-processing ---------------------------------------------------------------------------
struct TemplateItem {
  bool is_sequence = false;
  std::vector<int32_t> ids;  // special token ids when !is_sequence
};
using Template = std::vector<TemplateItem>;
// Appends the single-sequence templates of `json` (applied in order) to `templates`.
void parse_post_processor(const Json& json, std::vector<Template>& templates);

// ---- decoders ----------------------------------------------------------------------------------
// Streaming form of one decoder: receives tokens (or, once an earlier decoder fused them, chunks
// of one string) and emits tokens/chunks to the next stage.
class StageOutput {
 public:
  virtual void emit(std::string_view text) = 0;

 protected:
  ~StageOutput() = default;
};
class DecodeStage {
 public:
  virtual ~DecodeStage() = default;
  virtual void push(std::string_view token, StageOutput& out) = 0;
  virtual void flush(StageOutput& out) {}
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // tokenizers' decode_chain: tokens in, tokens out.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Whether the output is one string (every later decoder sees a single token).
  virtual bool fuses() const { return false; }
  // A stage equivalent to decode_chain when fed token by token (fused_input: the input is the
  // chunks of one string), or nullptr when that cannot be done exactly.
  virtual std::unique_ptr<DecodeStage> make_stage(bool fused_input) const = 0;
};
struct DecoderChain {
  bool present = false;                         // no decoder: tokens are joined with " "
  std::vector<std::unique_ptr<Decoder>> steps;  // Sequence flattened
};
DecoderChain make_decoder_chain(const Json& json);

}  // namespace dspark::tokenizer_detail

namespace dspark {

struct Tokenizer::Impl {
  std::string origin;
  std::unique_ptr<tokenizer_detail::Normalizer> normalizer;
  std::unique_ptr<tokenizer_detail::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tokenizer_detail::BpeModel> model;
  tokenizer_detail::DecoderChain decoder;
  std::vector<tokenizer_detail::Template> templates;
  tokenizer_detail::AddedTokenMatcher raw_matcher;         // normalized == false
  tokenizer_detail::AddedTokenMatcher normalized_matcher;  // normalized == true
  tokenizer_detail::StringMap<int32_t> added_by_content;
  std::vector<std::string> decode_form;  // per id: the string decoders receive
  std::vector<uint8_t> id_flags;         // per id: kIdExists | kIdSpecial | kIdSkipped
  int32_t bos = -1;
  int32_t eos = -1;

  static constexpr uint8_t kIdExists = 1, kIdSpecial = 2, kIdSkipped = 4;
  bool keep_in_decode(int32_t id, bool skip_special_tokens) const {
    if (id < 0 || static_cast<size_t>(id) >= id_flags.size()) return false;
    const uint8_t flags = id_flags[static_cast<size_t>(id)];
    return (flags & kIdExists) && !(skip_special_tokens && (flags & kIdSkipped));
  }
};

}  // namespace dspark
