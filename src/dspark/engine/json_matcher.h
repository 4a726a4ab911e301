// A byte-level recognizer of the JSON documents a JsonSchema (engine/json_schema.h) accepts, and
// the token masks derived from it.
//
// JsonMatcher is a pushdown automaton with a fixed-size state (a stack of small frames): copying
// it is a short memcpy, so a verify batch snapshots it per drafted position and the token mask
// walks the vocabulary's byte trie with one copy per trie edge. Output is compact JSON with at
// most kMaxJsonWhitespace whitespace bytes (space, newline) in a row between tokens.
//
// TokenVocab holds each token's bytes in a trie; allowed_tokens() sets the bits of the tokens whose
// bytes the matcher accepts from its state (a subtree is skipped as soon as its prefix is
// rejected). EOS is the JsonConstraint's business: allowed exactly when the document is complete.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/engine/json_schema.h"

namespace dspark {

inline constexpr int kMaxJsonWhitespace = 12;

class JsonMatcher {
 public:
  explicit JsonMatcher(const JsonSchema* schema);
  JsonMatcher(const JsonMatcher& other) { *this = other; }
  JsonMatcher& operator=(const JsonMatcher& other);

  // Consumes one byte; false when the schema's language has no document continuing this way (the
  // state is then unspecified: feed a copy when unsure).
  bool feed(uint8_t byte);
  bool feed(std::string_view bytes);
  // Whether the bytes so far form a complete document (EOS may follow).
  bool complete() const;
  // Whether the document is complete and nothing but EOS may follow.
  bool closed() const { return depth_ == 0; }
  // Replaces `out` with bytes naming the state: two matchers of one schema with equal keys accept
  // the same continuations (the key of a token mask cache, engine/json_mask.h).
  void state_key(std::string& out) const;

 private:
  enum class Kind : uint8_t { value, object, array, string, number, literal };
  enum class Step : uint8_t { consumed, rejected, ended };  // ended: the value ended before byte
  struct Frame {
    Kind kind = Kind::value;
    uint8_t st = 0;
    uint8_t utf8 = 0;        // continuation bytes still expected (strings, keys)
    uint8_t flags = 0;       // number: integer only; literal: true / false / null
    uint16_t pos = 0;        // key / literal: bytes matched
    int32_t node = 0;        // schema node
    int32_t value_node = 0;  // object: node of the current key's value
    uint64_t seen = 0;       // object: declared properties present
    uint64_t cand = 0;       // key / literal: candidates still matching
  };
  static constexpr int kStack = kMaxJsonNesting + 2;

  bool push(Kind kind, int32_t node);
  bool start_value(Frame& f, uint8_t c);
  bool string_byte(Frame& f, uint8_t c);
  bool key_byte(Frame& f, uint8_t c);
  bool object_byte(Frame& f, uint8_t c);
  Step number_byte(Frame& f, uint8_t c);
  Step literal_byte(Frame& f, uint8_t c);
  bool literal_exact(const Frame& f) const;
  bool begin_key(Frame& f);
  bool can_add_key(const Frame& f) const;
  const std::vector<std::string>& literals(const Frame& f) const;

  const JsonSchema* schema_;
  int depth_ = 0;
  uint8_t ws_ = 0;  // whitespace bytes in a row
  std::array<Frame, kStack> stack_;
};

class TokenVocab {
 public:
  // token_bytes[id]: the bytes token id adds to the text ("" for ids that never appear in JSON
  // output: special tokens).
  explicit TokenVocab(const std::vector<std::string>& token_bytes);
  int32_t size() const { return vocab_size_; }

  // Feeds token id's bytes to `m`; false when they are not allowed there (or id has none).
  bool advance(JsonMatcher& m, int32_t id) const;

  // Sets bit id % 32 of bits[id / 32] when token id may follow the matcher's state and clears the
  // others (ops/token_mask.h layout); bits holds at least (size() + 31) / 32 words (the words
  // past them are zeroed too).
  void allowed_tokens(const JsonMatcher& m, std::span<uint32_t> bits) const;

 private:
  // The trie in CSR form: node n's children are edges [child_begin[n], child_begin[n + 1]).
  std::vector<uint32_t> child_begin_;
  std::vector<uint8_t> edge_byte_;
  std::vector<uint32_t> edge_node_;
  std::vector<uint32_t> token_begin_;  // node n's tokens: tokens_[token_begin[n], ...[n + 1])
  std::vector<int32_t> tokens_;
  std::vector<std::string> bytes_;
  int32_t vocab_size_ = 0;
  size_t max_len_ = 0;
};

// What a request asks of its output: the document's schema, the vocabulary to mask and the
// tokens that end the output (allowed only once the document is complete).
struct JsonConstraint {
  JsonSchema schema;
  std::shared_ptr<const TokenVocab> vocab;
  std::vector<int32_t> eos;
  bool is_eos(int32_t id) const;
};

}  // namespace dspark
