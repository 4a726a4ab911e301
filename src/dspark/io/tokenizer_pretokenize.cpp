// tokenizer.json "pre_tokenizer" section.
#include "dspark/core/error.h"
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/utf8.h"

namespace dspark::tokenizer_detail {
namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

Behavior behavior_from_name(const std::string& name) {
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  DSPARK_FAIL(unsupported, "split behavior '{}' is not supported", name);
}

struct Span {
  size_t start;
  size_t end;
  bool flag;  // is a match (before applying the behavior) / is removed (after)
};

// Splits `piece` at the matches of `regex` like tokenizers' NormalizedString::split.
void split_piece(const Piece& piece, const Regex& regex, Behavior behavior, bool invert,
                 std::vector<Piece>& out) {
  const std::string& text = piece.text;
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, matches);
  // Spans covering the whole piece, flagged as match / not match.
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t previous = 0;
  for (const auto& [start, end] : matches) {
    if (previous != start) spans.push_back({previous, start, invert});
    spans.push_back({start, end, !invert});
    previous = end;
  }
  if (previous != text.size()) spans.push_back({previous, text.size(), invert});

  std::vector<Span> splits;  // flag = remove
  splits.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      for (const Span& s : spans) splits.push_back({s.start, s.end, false});
      break;
    case Behavior::removed:
      splits = spans;
      break;
    case Behavior::contiguous:
      for (const Span& s : spans) {
        if (s.flag == previous_match && !splits.empty()) {
          splits.back().end = s.end;
        } else {
          splits.push_back({s.start, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    case Behavior::merged_with_previous:
      for (const Span& s : spans) {
        if (s.flag && !previous_match && !splits.empty()) {
          splits.back().end = s.end;
        } else {
          splits.push_back({s.start, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !splits.empty()) {
          splits.back().start = it->start;
        } else {
          splits.push_back({it->start, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const Span& s : splits) {
    if (s.flag || s.start == s.end) continue;
    out.push_back({text.substr(s.start, s.end - s.start), piece.at_start && s.start == 0});
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    for (const Piece& piece : pieces) split_piece(piece, regex_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) {
      // The GPT-2 pattern tokenizers uses for ByteLevel(use_regex=true).
      regex_ = std::make_unique<Regex>(Regex::compile(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"));
    }
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    split.reserve(pieces.size());
    for (Piece& piece : pieces) {
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' '))
        piece.text.insert(0, 1, ' ');
      if (regex_) {
        split_piece(piece, *regex_, Behavior::isolated, false, split);
      } else if (!piece.text.empty()) {
        split.push_back(std::move(piece));
      }
    }
    const auto& chars = byte_level_chars();
    for (Piece& piece : split) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      for (const char c : piece.text) mapped += chars[static_cast<unsigned char>(c)];
      piece.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { always, first, never };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        regex_(Regex::literal(replacement_)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& piece : pieces) {
      std::string text;
      for (const char c : piece.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (prepend_ == Prepend::always || (prepend_ == Prepend::first && piece.at_start)))
        text.insert(0, replacement_);
      Piece replaced{std::move(text), piece.at_start};
      if (split_) {
        split_piece(replaced, regex_, Behavior::merged_with_next, false, out);
      } else if (!replaced.text.empty()) {
        out.push_back(std::move(replaced));
      }
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::unique_ptr<PreTokenizer> make_metaspace(const Json& json) {
  const std::string replacement = string_field(json, "replacement", "Metaspace pre-tokenizer");
  auto prepend = MetaspacePreTokenizer::Prepend::always;
  if (json.contains("prepend_scheme") && json.at("prepend_scheme").is_string()) {
    const std::string scheme = json.at("prepend_scheme").get<std::string>();
    if (scheme == "first") {
      prepend = MetaspacePreTokenizer::Prepend::first;
    } else if (scheme == "never") {
      prepend = MetaspacePreTokenizer::Prepend::never;
    } else {
      DSPARK_CHECK_KIND(io, scheme == "always", "unknown Metaspace prepend_scheme '{}'", scheme);
    }
  }
  if (json.contains("add_prefix_space") && json.at("add_prefix_space") == false)
    prepend = MetaspacePreTokenizer::Prepend::never;
  return std::make_unique<MetaspacePreTokenizer>(replacement, prepend,
                                                 bool_field(json, "split", true));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& json) {
  if (json.is_null()) return nullptr;
  const std::string type = string_field(json, "type", "pre_tokenizer");
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        pattern_from_json(field(json, "pattern", "Split pre-tokenizer"), "Split pre-tokenizer"),
        behavior_from_name(string_field(json, "behavior", "Split pre-tokenizer")),
        bool_field(json, "invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(bool_field(json, "add_prefix_space", true),
                                                   bool_field(json, "use_regex", true));
  }
  if (type == "Metaspace") return make_metaspace(json);
  if (type == "Digits") {
    // char::is_numeric runs (Contiguous) or single numeric characters (Isolated).
    const bool individual = bool_field(json, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(Regex::compile(individual ? "\\p{N}" : "\\p{N}+"),
                                               Behavior::isolated, false);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& step : field(json, "pretokenizers", "Sequence pre-tokenizer")) {
      if (auto p = make_pre_tokenizer(step)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  DSPARK_FAIL(unsupported, "pre-tokenizer type '{}' is not supported", type);
}

}  // namespace dspark::tokenizer_detail
