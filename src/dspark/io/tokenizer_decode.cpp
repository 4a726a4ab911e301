// tokenizer.json "decoder" section: each decoder in batch form (tokenizers' decode_chain) and in
// streaming form (DecodeStage), plus Tokenizer::decode and IncrementalDecoder.
#include <algorithm>

#include "dspark/core/error.h"
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/utf8.h"

namespace dspark::tokenizer_detail {
namespace {

// ---- ByteLevel: characters back to bytes, the whole output lossily decoded as UTF-8 ----------
// A token whose characters are not all in the byte alphabet contributes its own UTF-8 bytes.
void append_token_bytes(std::string_view token, std::string& bytes) {
  const size_t mark = bytes.size();
  size_t i = 0;
  while (i < token.size()) {
    const int32_t cp = utf8::next(token, i);
    const int b = cp < 0 ? -1 : byte_level_byte(static_cast<char32_t>(cp));
    if (b < 0) {
      bytes.resize(mark);
      bytes.append(token);
      return;
    }
    bytes.push_back(static_cast<char>(b));
  }
}

class ByteLevelStage final : public DecodeStage {
 public:
  void push(std::string_view token, StageOutput& out) override {
    bytes_.clear();
    append_token_bytes(token, bytes_);
    text_.clear();
    decoder_.push(bytes_, text_);
    if (!text_.empty()) out.emit(text_);
  }
  void flush(StageOutput& out) override {
    text_.clear();
    decoder_.flush(text_);
    if (!text_.empty()) out.emit(text_);
  }

 private:
  utf8::LossyDecoder decoder_;
  std::string bytes_, text_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) append_token_bytes(token, bytes);
    tokens.assign(1, utf8::to_valid_lossy(bytes));
  }
  bool fuses() const override { return true; }
  std::unique_ptr<DecodeStage> make_stage(bool fused_input) const override {
    // On a fused string the byte-or-raw choice depends on all of it: not streamable.
    if (fused_input) return nullptr;
    return std::make_unique<ByteLevelStage>();
  }
};

// ---- Replace ----------------------------------------------------------------------------------
class ReplaceStage final : public DecodeStage {
 public:
  ReplaceStage(const Replacement& replacement, bool fused)
      : replacement_(replacement), fused_(fused) {}
  void push(std::string_view token, StageOutput& out) override {
    if (!fused_) {
      out.emit(replacement_.apply(std::string(token)));
      return;
    }
    // One literal pattern over a stream: replace complete matches, hold back a suffix that may
    // begin the next one.
    held_.append(token);
    const std::string& pattern = replacement_.literal;
    std::string text;
    size_t done = 0;
    for (size_t at = held_.find(pattern); at != std::string::npos; at = held_.find(pattern, done)) {
      text.append(held_, done, at - done);
      text += replacement_.content;
      done = at + pattern.size();
    }
    const std::string_view rest = std::string_view(held_).substr(done);
    size_t keep = std::min(pattern.size() - 1, rest.size());
    while (keep > 0 && !rest.ends_with(std::string_view(pattern).substr(0, keep))) --keep;
    text.append(rest.substr(0, rest.size() - keep));
    held_ = std::string(rest.substr(rest.size() - keep));
    if (!text.empty()) out.emit(text);
  }
  void flush(StageOutput& out) override {
    if (!held_.empty()) out.emit(held_);
    held_.clear();
  }

 private:
  const Replacement& replacement_;
  bool fused_;
  std::string held_;
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const Json& json)
      : replacement_(Replacement::from_json(json, "Replace decoder")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = replacement_.apply(std::move(token));
  }
  std::unique_ptr<DecodeStage> make_stage(bool fused_input) const override {
    if (fused_input && (!replacement_.is_literal || replacement_.literal.empty())) return nullptr;
    return std::make_unique<ReplaceStage>(replacement_, fused_input);
  }

 private:
  Replacement replacement_;
};

// ---- ByteFallback: runs of <0xXX> tokens become their bytes if valid UTF-8, else one U+FFFD per
// byte --------------------------------------------------------------------------------------------
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xXX>" token (Rust's u8::from_str_radix accepts "+X" too), or -1.
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  if (token[3] == '+') return hex_digit(token[4]);
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

template <typename Emit>
void emit_byte_run(const std::string& run, Emit&& emit) {
  if (run.empty()) return;
  if (utf8::find_invalid(run) == std::string::npos) {
    emit(std::string_view(run));
  } else {
    for (size_t i = 0; i < run.size(); ++i) emit(utf8::kReplacementUtf8);
  }
}

class ByteFallbackStage final : public DecodeStage {
 public:
  void push(std::string_view token, StageOutput& out) override {
    const int b = fallback_byte(token);
    if (b >= 0) {
      run_.push_back(static_cast<char>(b));
      return;
    }
    flush(out);
    out.emit(token);
  }
  void flush(StageOutput& out) override {
    emit_byte_run(run_, [&](std::string_view t) { out.emit(t); });
    run_.clear();
  }

 private:
  std::string run_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto emit = [&](std::string_view t) { out.emplace_back(t); };
    for (std::string& token : tokens) {
      const int b = fallback_byte(token);
      if (b >= 0) {
        run.push_back(static_cast<char>(b));
        continue;
      }
      emit_byte_run(run, emit);
      run.clear();
      out.push_back(std::move(token));
    }
    emit_byte_run(run, emit);
    tokens = std::move(out);
  }
  std::unique_ptr<DecodeStage> make_stage(bool fused_input) const override {
    if (fused_input) return nullptr;  // the whole fused string would be one candidate token
    return std::make_unique<ByteFallbackStage>();
  }
};

// ---- Fuse -------------------------------------------------------------------------------------
class PassStage final : public DecodeStage {
 public:
  void push(std::string_view token, StageOutput& out) override { out.emit(token); }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
  bool fuses() const override { return true; }
  std::unique_ptr<DecodeStage> make_stage(bool) const override {
    return std::make_unique<PassStage>();
  }
};

// ---- Strip: up to `start` leading and `stop` trailing `content` characters of each token
// ---------
std::string strip_token(std::string_view token, char32_t content, size_t start, size_t stop) {
  std::vector<std::pair<char32_t, size_t>> chars;  // code point, byte offset
  for (size_t i = 0; i < token.size();) {
    const size_t at = i;
    chars.emplace_back(static_cast<char32_t>(utf8::next(token, i)), at);
  }
  size_t start_cut = 0;
  for (size_t i = 0; i < std::min(start, chars.size()); ++i) {
    if (chars[i].first != content) break;
    start_cut = i + 1;
  }
  size_t stop_cut = chars.size();
  for (size_t i = 0; i < std::min(stop, chars.size()); ++i) {
    const size_t index = chars.size() - i - 1;
    if (chars[index].first != content) break;
    stop_cut = index;
  }
  if (stop_cut <= start_cut) return {};
  const size_t begin = chars[start_cut].second;
  const size_t end = stop_cut < chars.size() ? chars[stop_cut].second : token.size();
  return std::string(token.substr(begin, end - begin));
}

class StripStage final : public DecodeStage {
 public:
  StripStage(char32_t content, size_t start, size_t stop, bool fused)
      : content_(content), start_(start), stop_(stop), fused_(fused) {
    utf8::append(content_utf8_, content);
  }
  void push(std::string_view token, StageOutput& out) override {
    if (!fused_) {
      out.emit(strip_token(token, content_, start_, stop_));
      return;
    }
    std::string text;
    for (size_t i = 0; i < token.size();) {
      const size_t at = i;
      const auto cp = static_cast<char32_t>(utf8::next(token, i));
      if (leading_ && cp == content_ && n_stripped_ < start_) {
        ++n_stripped_;
        continue;
      }
      leading_ = false;
      if (cp == content_) {
        // One of the last `stop` characters may be stripped: hold those until more text follows.
        if (n_held_ < stop_) {
          ++n_held_;
        } else {
          text += content_utf8_;
        }
        continue;
      }
      for (; n_held_ > 0; --n_held_) text += content_utf8_;
      text.append(token.substr(at, i - at));
    }
    if (!text.empty()) out.emit(text);
  }
  void flush(StageOutput& out) override {
    std::string text;
    for (size_t n = n_held_ - std::min(n_held_, stop_); n > 0; --n) text += content_utf8_;
    if (!text.empty()) out.emit(text);
    n_held_ = 0;
  }

 private:
  char32_t content_;
  std::string content_utf8_;
  size_t start_, stop_;
  bool fused_;
  bool leading_ = true;
  size_t n_stripped_ = 0;
  size_t n_held_ = 0;
};

class StripDecoder final : public Decoder {
 public:
  explicit StripDecoder(const Json& json) {
    const std::string content = string_field(json, "content", "Strip decoder");
    size_t i = 0;
    const int32_t cp = content.empty() ? -1 : utf8::next(content, i);
    DSPARK_CHECK_KIND(io, cp >= 0 && i == content.size(),
                      "Strip decoder content must be one character, got '{}'", content);
    content_ = static_cast<char32_t>(cp);
    start_ = field(json, "start", "Strip decoder").get<size_t>();
    stop_ = field(json, "stop", "Strip decoder").get<size_t>();
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = strip_token(token, content_, start_, stop_);
  }
  std::unique_ptr<DecodeStage> make_stage(bool fused_input) const override {
    return std::make_unique<StripStage>(content_, start_, stop_, fused_input);
  }

 private:
  char32_t content_ = ' ';
  size_t start_ = 0, stop_ = 0;
};

// ---- Metaspace: the replacement character back to spaces; in the first token it is dropped ----
std::string metaspace_token(std::string_view token, char32_t replacement, bool drop) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const size_t at = i;
    const auto cp = static_cast<char32_t>(utf8::next(token, i));
    if (cp != replacement) {
      out.append(token.substr(at, i - at));
    } else if (!drop) {
      out += ' ';
    }
  }
  return out;
}

class MetaspaceStage final : public DecodeStage {
 public:
  MetaspaceStage(char32_t replacement, bool prepends, bool fused)
      : replacement_(replacement), prepends_(prepends), fused_(fused) {}
  void push(std::string_view token, StageOutput& out) override {
    const bool first = fused_ || n_tokens_ == 0;
    ++n_tokens_;
    out.emit(metaspace_token(token, replacement_, first && prepends_));
  }

 private:
  char32_t replacement_;
  bool prepends_;
  bool fused_;
  size_t n_tokens_ = 0;
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const Json& json) {
    const std::string replacement = string_field(json, "replacement", "Metaspace decoder");
    size_t i = 0;
    const int32_t cp = replacement.empty() ? -1 : utf8::next(replacement, i);
    DSPARK_CHECK_KIND(io, cp >= 0 && i == replacement.size(),
                      "Metaspace replacement must be one character, got '{}'", replacement);
    replacement_ = static_cast<char32_t>(cp);
    if (json.contains("prepend_scheme") && json.at("prepend_scheme").is_string())
      prepends_ = json.at("prepend_scheme").get<std::string>() != "never";
    if (json.contains("add_prefix_space") && json.at("add_prefix_space") == false)
      prepends_ = false;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = metaspace_token(tokens[i], replacement_, i == 0 && prepends_);
  }
  std::unique_ptr<DecodeStage> make_stage(bool fused_input) const override {
    return std::make_unique<MetaspaceStage>(replacement_, prepends_, fused_input);
  }

 private:
  char32_t replacement_ = 0x2581;
  bool prepends_ = true;
};

void append_decoders(const Json& json, DecoderChain& chain) {
  const std::string type = string_field(json, "type", "decoder");
  if (type == "Sequence") {
    for (const Json& step : field(json, "decoders", "Sequence decoder"))
      append_decoders(step, chain);
    return;
  }
  std::unique_ptr<Decoder> decoder;
  if (type == "ByteLevel") {
    decoder = std::make_unique<ByteLevelDecoder>();
  } else if (type == "Replace") {
    decoder = std::make_unique<ReplaceDecoder>(json);
  } else if (type == "ByteFallback") {
    decoder = std::make_unique<ByteFallbackDecoder>();
  } else if (type == "Fuse") {
    decoder = std::make_unique<FuseDecoder>();
  } else if (type == "Strip") {
    decoder = std::make_unique<StripDecoder>(json);
  } else if (type == "Metaspace") {
    decoder = std::make_unique<MetaspaceDecoder>(json);
  } else {
    DSPARK_FAIL(unsupported, "decoder type '{}' is not supported", type);
  }
  chain.steps.push_back(std::move(decoder));
}

}  // namespace

DecoderChain make_decoder_chain(const Json& json) {
  DecoderChain chain;
  if (json.is_null()) return chain;
  chain.present = true;
  append_decoders(json, chain);
  return chain;
}

namespace {

std::string decode_ids(const Tokenizer::Impl& impl, std::span<const int32_t> ids,
                       bool skip_special_tokens) {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (impl.keep_in_decode(id, skip_special_tokens))
      tokens.push_back(impl.decode_form[static_cast<size_t>(id)]);
  }
  std::string text;
  if (!impl.decoder.present) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
    return text;
  }
  for (const auto& step : impl.decoder.steps) step->decode_chain(tokens);
  for (const std::string& token : tokens) text += token;
  return text;
}

}  // namespace
}  // namespace dspark::tokenizer_detail

namespace dspark {

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return tokenizer_detail::decode_ids(*impl_, ids, skip_special_tokens);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  using namespace tokenizer_detail;
  if (id < 0 || id >= vocab_size() || is_special(id)) return "";
  const std::string& form = impl_->decode_form[static_cast<size_t>(id)];
  std::string bytes;
  for (const auto& step : impl_->decoder.steps) {
    if (dynamic_cast<const ByteLevelDecoder*>(step.get()) != nullptr) {
      append_token_bytes(form, bytes);
      return bytes;
    }
  }
  if (const int b = fallback_byte(form); b >= 0) return std::string(1, static_cast<char>(b));
  // SentencePiece-style pieces: U+2581 stands for a space.
  static constexpr std::string_view kMetaspace = "\xE2\x96\x81";
  for (size_t i = 0; i < form.size();) {
    if (form.compare(i, kMetaspace.size(), kMetaspace) == 0) {
      bytes.push_back(' ');
      i += kMetaspace.size();
    } else {
      bytes.push_back(form[i++]);
    }
  }
  return bytes;
}

// ---- IncrementalDecoder -----------------------------------------------------------------------
struct IncrementalDecoder::State {
  // Output of stage `index - 1`: delivers into stage `index` (or the result after the last).
  struct Link final : tokenizer_detail::StageOutput {
    State* state = nullptr;
    size_t index = 0;
    void emit(std::string_view text) override { state->deliver(index, text); }
  };

  std::shared_ptr<const Tokenizer::Impl> impl;
  bool skip_special_tokens = false;
  bool streamable = true;
  bool first = true;              // no decoder: tokens are joined by " "
  std::vector<int32_t> buffered;  // non-streamable chains decode at flush()
  std::vector<std::unique_ptr<tokenizer_detail::DecodeStage>> stages;
  std::vector<Link> links;  // links[k]: output of stage k
  std::string out;

  void start() {
    stages.clear();
    links.clear();
    bool fused = false;
    for (const auto& step : impl->decoder.steps) {
      auto stage = step->make_stage(fused);
      if (stage == nullptr) {
        streamable = false;
        stages.clear();
        return;
      }
      stages.push_back(std::move(stage));
      fused = fused || step->fuses();
    }
    links.resize(stages.size());
    for (size_t k = 0; k < stages.size(); ++k) {
      links[k].state = this;
      links[k].index = k + 1;
    }
  }
  void deliver(size_t index, std::string_view text) {
    if (index == stages.size()) {
      out.append(text);
    } else {
      stages[index]->push(text, links[index]);
    }
  }
};

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : state_(std::make_unique<State>()) {
  state_->impl = tokenizer.impl_;
  state_->skip_special_tokens = skip_special_tokens;
  state_->start();
}

IncrementalDecoder::IncrementalDecoder(IncrementalDecoder&&) noexcept = default;
IncrementalDecoder& IncrementalDecoder::operator=(IncrementalDecoder&&) noexcept = default;
IncrementalDecoder::~IncrementalDecoder() = default;

std::string IncrementalDecoder::feed(int32_t id) {
  State& s = *state_;
  if (!s.impl->keep_in_decode(id, s.skip_special_tokens)) return {};
  const std::string& token = s.impl->decode_form[static_cast<size_t>(id)];
  if (!s.impl->decoder.present) {
    std::string text = s.first ? token : " " + token;
    s.first = false;
    return text;
  }
  if (!s.streamable) {
    s.buffered.push_back(id);
    return {};
  }
  s.deliver(0, token);
  return std::exchange(s.out, {});
}

std::string IncrementalDecoder::flush() {
  State& s = *state_;
  s.first = true;
  if (!s.impl->decoder.present) return {};
  if (!s.streamable) {
    std::string text = tokenizer_detail::decode_ids(*s.impl, s.buffered, s.skip_special_tokens);
    s.buffered.clear();
    return text;
  }
  for (size_t k = 0; k < s.stages.size(); ++k) s.stages[k]->flush(s.links[k]);
  s.start();
  return std::exchange(s.out, {});
}

}  // namespace dspark
