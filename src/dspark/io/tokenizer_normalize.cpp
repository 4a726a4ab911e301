// tokenizer.json "normalizer" section.
#include "dspark/core/error.h"
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/tokenizer_unicode.h"
#include "dspark/io/utf8.h"

namespace dspark::tokenizer_detail {
namespace {

class NfcNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return unicode::nfc(text); }
};

class NfdNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return unicode::nfd(text); }
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(const Json& json)
      : replacement_(Replacement::from_json(json, "Replace normalizer")) {}
  std::string normalize(std::string text) const override {
    return replacement_.apply(std::move(text));
  }

 private:
  Replacement replacement_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  std::string normalize(std::string text) const override {
    return text.empty() ? text : prepend_ + text;
  }

 private:
  std::string prepend_;
};

// Strips White_Space characters on the left and/or right.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      size_t i = 0;
      while (i < text.size()) {
        const size_t at = i;
        const int32_t cp = utf8::next(text, i);
        if (cp < 0 || !unicode::is_white_space(static_cast<char32_t>(cp))) {
          begin = at;
          break;
        }
        begin = i;
      }
    }
    if (right_) {
      size_t i = begin, last_end = begin;
      while (i < text.size()) {
        const int32_t cp = utf8::next(text, i);
        if (cp < 0 || !unicode::is_white_space(static_cast<char32_t>(cp))) last_end = i;
      }
      end = last_end;
    }
    return text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

Replacement Replacement::from_json(const Json& json, const char* where) {
  Replacement r;
  r.content = string_field(json, "content", where);
  const Json& pattern = field(json, "pattern", where);
  if (pattern.contains("String")) {
    r.literal = pattern.at("String").get<std::string>();
  } else {
    r.is_literal = false;
    r.regex = std::make_shared<const Regex>(pattern_from_json(pattern, where));
  }
  return r;
}

std::string Replacement::apply(std::string text) const {
  std::string out;
  size_t done = 0;
  bool any = false;
  if (is_literal) {
    if (literal.empty()) return text;
    for (size_t at = text.find(literal); at != std::string::npos; at = text.find(literal, done)) {
      out.append(text, done, at - done);
      out += content;
      done = at + literal.size();
      any = true;
    }
  } else {
    std::vector<std::pair<size_t, size_t>> matches;
    regex->find_all(text, matches);
    for (const auto& [start, end] : matches) {
      out.append(text, done, start - done);
      out += content;
      done = end;
      any = true;
    }
  }
  if (!any) return text;
  out.append(text, done, std::string::npos);
  return out;
}

std::unique_ptr<Normalizer> make_normalizer(const Json& json) {
  if (json.is_null()) return nullptr;
  const std::string type = string_field(json, "type", "normalizer");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "NFD") return std::make_unique<NfdNormalizer>();
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(json);
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(string_field(json, "prepend", "Prepend normalizer"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(bool_field(json, "strip_left", true),
                                             bool_field(json, "strip_right", true));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& step : field(json, "normalizers", "Sequence normalizer")) {
      if (auto n = make_normalizer(step)) steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  DSPARK_FAIL(unsupported, "normalizer type '{}' is not supported", type);
}

}  // namespace dspark::tokenizer_detail
