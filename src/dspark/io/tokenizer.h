// Hugging Face tokenizer.json (BPE models) with exact parity to the `tokenizers` library:
// byte-level BPE (Qwen3, Llama 3/3.1, DeepSeek-V3) and SentencePiece-style BPE with byte fallback
// (Llama 2, Gemma 3). Every section of the file is read and implemented generically:
//   normalizer      NFC, NFD, Replace, Prepend, Strip, Sequence
//   pre_tokenizer   Split (String/Regex pattern, all behaviors, invert), ByteLevel, Metaspace,
//                   Digits, Sequence
//   model           BPE (merges by rank, byte_fallback, unk/fuse_unk, ignore_merges,
//                   continuing_subword_prefix / end_of_word_suffix)
//   post_processor  TemplateProcessing (single sequence), ByteLevel, Sequence
//   decoder         ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
// Added tokens are matched before normalization (normalized=false) or after it (normalized=true),
// leftmost-longest, honouring lstrip/rstrip/single_word, and are never split.
// Anything else fails at load time with ErrorKind::unsupported. Regexes run on PCRE2; see
// tokenizer_regex.h for how Oniguruma semantics (and Unicode 16 properties) are reproduced.
//
// Thread safety: a Tokenizer is immutable after loading (its word cache is internally locked);
// encode/decode may be called concurrently. Copies share the loaded data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dspark {

class IncrementalDecoder;
class GgufFile;

class Tokenizer {
 public:
  // `path`: a tokenizer.json or tokenizer.json.xz file, or a directory holding one. A
  // tokenizer_config.json next to it, if any, supplies bos_token / eos_token. Throws
  // ErrorKind::io (missing/corrupt file, bad JSON, inconsistent vocabulary: the message names the
  // file and the problem) or ErrorKind::unsupported (a model/normalizer/pre-tokenizer/decoder/
  // post-processor type we do not implement).
  static Tokenizer from_file(const std::filesystem::path& path);
  // The same from the text of a tokenizer.json; `origin` names it in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view origin = "<memory>");
  // The tokenizer of a GGUF file (tokenizer.ggml.*, see io/gguf.h): bos_id / eos_id are the
  // file's tokenizer.ggml.bos_token_id / eos_token_id.
  static Tokenizer from_gguf(const GgufFile& file);

  // Token ids of `text` (valid UTF-8, else ErrorKind::invalid_input). add_special_tokens applies
  // the post-processor template (e.g. Llama's BOS), like tokenizers' encode(text, True).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Text of `ids` like tokenizers' decode(ids, skip_special_tokens): unknown ids are skipped,
  // invalid byte sequences become U+FFFD. The result is valid UTF-8.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The bytes token `id` adds to decoded text on its own: byte-level BPE characters mapped back
  // to bytes (possibly a partial UTF-8 sequence), a "<0xXX>" byte-fallback token's byte, or the
  // piece with U+2581 as a space; "" for special tokens and unknown ids. Structured output
  // matches these against its grammar.
  std::string token_bytes(int32_t id) const;
  int32_t token_to_id(std::string_view token) const;  // added tokens first, then the model; -1
  std::string id_to_token(int32_t id) const;          // "" if the id is unknown
  // Number of ids: 1 + the largest id of the model vocabulary and the added tokens (for the files
  // we support the ids are dense, so this equals tokenizers' get_vocab_size(True)).
  int vocab_size() const;
  bool is_special(int32_t id) const;  // an added token marked "special"
  // Best effort: tokenizer_config.json's bos_token/eos_token when present, else the first special
  // token of the post-processor template (BOS), else well-known names; -1 when none is found.
  int32_t bos_id() const;
  int32_t eos_id() const;
  const std::string& origin() const;  // file name (or the origin given to from_json)

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
  friend class IncrementalDecoder;
};

// Streams text out of ids one at a time: each feed() returns only complete UTF-8 characters and
// nothing that a later id could still change; flush() returns the rest at the end of the stream.
// The concatenation of all returned strings equals tokenizer.decode(all ids, skip_special_tokens).
// (Text is held back only where decode() itself looks ahead: an incomplete UTF-8 sequence, a run
// of <0xXX> byte tokens, trailing characters a Strip decoder may remove. Decoder chains that cannot
// be streamed exactly are buffered until flush().) After flush() the decoder starts a new stream.
// It keeps the tokenizer's data alive.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  IncrementalDecoder(IncrementalDecoder&&) noexcept;
  IncrementalDecoder& operator=(IncrementalDecoder&&) noexcept;
  ~IncrementalDecoder();

  std::string feed(int32_t id);
  std::string flush();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dspark
