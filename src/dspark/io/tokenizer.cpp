// Tokenizer: loading tokenizer.json, added tokens, the encode pipeline and post-processing.
// Decoding lives in tokenizer_decode.cpp, the components in tokenizer_{normalize,pretokenize,
// bpe,added}.cpp.
#include "dspark/io/tokenizer.h"

#include <algorithm>
#include <unordered_set>

#include "dspark/core/error.h"
#include "dspark/io/gguf.h"
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/utf8.h"
#include "dspark/io/xz.h"

namespace dspark {
namespace tokenizer_detail {

const Json& field(const Json& object, const char* name, const char* where) {
  DSPARK_CHECK_KIND(io, object.is_object(), "{} is not a JSON object", where);
  const auto it = object.find(name);
  DSPARK_CHECK_KIND(io, it != object.end(), "{} has no \"{}\"", where, name);
  return *it;
}

std::string string_field(const Json& object, const char* name, const char* where) {
  const Json& value = field(object, name, where);
  DSPARK_CHECK_KIND(io, value.is_string(), "{}.{} is not a string", where, name);
  return value.get<std::string>();
}

bool bool_field(const Json& object, const char* name, bool fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return fallback;
  DSPARK_CHECK_KIND(io, it->is_boolean(), "\"{}\" is not a boolean", name);
  return it->get<bool>();
}

namespace {

// GPT-2's byte alphabet: printable bytes map to themselves, the other 68 to U+0100 onwards.
struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 0x180> bytes{};
  ByteLevelTables() {
    bytes.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      utf8::append(chars[static_cast<size_t>(b)], cp);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  return byte_level_tables().chars;
}

int byte_level_byte(char32_t cp) {
  return cp < 0x180 ? byte_level_tables().bytes[cp] : -1;
}

Regex pattern_from_json(const Json& pattern, const char* where) {
  DSPARK_CHECK_KIND(io, pattern.is_object(), "{}: pattern is not an object", where);
  if (pattern.contains("String")) return Regex::literal(pattern.at("String").get<std::string>());
  if (pattern.contains("Regex")) return Regex::compile(pattern.at("Regex").get<std::string>());
  DSPARK_FAIL(io, "{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

void parse_post_processor(const Json& json, std::vector<Template>& templates) {
  if (json.is_null()) return;
  const std::string type = string_field(json, "type", "post_processor");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const Json& step : field(json, "processors", "Sequence post_processor"))
      parse_post_processor(step, templates);
    return;
  }
  DSPARK_CHECK_KIND(unsupported, type == "TemplateProcessing",
                    "post_processor type '{}' is not supported", type);
  const Json& special = field(json, "special_tokens", "TemplateProcessing");
  Template result;
  for (const Json& item : field(json, "single", "TemplateProcessing")) {
    if (item.contains("Sequence")) {
      result.push_back({true, {}});
      continue;
    }
    const std::string name =
        string_field(field(item, "SpecialToken", "template item"), "id", "SpecialToken");
    DSPARK_CHECK_KIND(io, special.contains(name),
                      "template special token '{}' is not in special_tokens", name);
    TemplateItem token;
    token.ids = field(special.at(name), "ids", "special_tokens entry").get<std::vector<int32_t>>();
    result.push_back(std::move(token));
  }
  templates.push_back(std::move(result));
}

}  // namespace tokenizer_detail

namespace {

using tokenizer_detail::Json;

int32_t lookup(const Tokenizer::Impl& impl, std::string_view token) {
  const auto it = impl.added_by_content.find(token);
  if (it != impl.added_by_content.end()) return it->second;
  return impl.model->token_to_id(token);
}

// The first of `names` that is a special added token (plain vocabulary entries such as Qwen's
// "<s>" do not count), or -1.
int32_t first_special(const Tokenizer::Impl& impl, std::initializer_list<std::string_view> names) {
  for (const std::string_view name : names) {
    const auto it = impl.added_by_content.find(name);
    if (it != impl.added_by_content.end() &&
        (impl.id_flags[static_cast<size_t>(it->second)] & Tokenizer::Impl::kIdSpecial))
      return it->second;
  }
  return -1;
}

void load_added_tokens(Tokenizer::Impl& impl, const Json& list, int32_t& max_id) {
  std::vector<tokenizer_detail::AddedToken> tokens;
  std::unordered_set<std::string> special_contents;
  int32_t next_id = impl.model->size();
  for (const Json& entry : list) {
    tokenizer_detail::AddedToken token;
    token.content = tokenizer_detail::string_field(entry, "content", "added token");
    if (token.content.empty()) continue;
    // Like tokenizers: a token the vocabulary (or an earlier added token) knows keeps that id,
    // others get consecutive ids after the vocabulary (the file's "id" is only a hint there).
    DSPARK_CHECK_KIND(io, tokenizer_detail::field(entry, "id", "added token").is_number_unsigned(),
                      "added token '{}' has no valid id", token.content);
    token.id = lookup(impl, token.content);
    if (token.id < 0) token.id = next_id++;
    token.special = tokenizer_detail::bool_field(entry, "special", false);
    token.normalized = tokenizer_detail::bool_field(entry, "normalized", true);
    token.lstrip = tokenizer_detail::bool_field(entry, "lstrip", false);
    token.rstrip = tokenizer_detail::bool_field(entry, "rstrip", false);
    token.single_word = tokenizer_detail::bool_field(entry, "single_word", false);
    impl.added_by_content[token.content] = token.id;
    if (token.special) special_contents.insert(token.content);
    max_id = std::max(max_id, token.id);
    tokens.push_back(std::move(token));
  }

  impl.decode_form.resize(static_cast<size_t>(max_id + 1));
  impl.id_flags.assign(static_cast<size_t>(max_id + 1), 0);
  for (int32_t id = 0; id <= impl.model->max_id(); ++id) {
    if (const std::string* token = impl.model->id_to_token(id)) {
      impl.decode_form[static_cast<size_t>(id)] = *token;
      impl.id_flags[static_cast<size_t>(id)] = Tokenizer::Impl::kIdExists;
    }
  }
  for (tokenizer_detail::AddedToken& token : tokens) {
    const auto id = static_cast<size_t>(token.id);
    uint8_t& flags = impl.id_flags[id];
    flags = Tokenizer::Impl::kIdExists | (token.special ? Tokenizer::Impl::kIdSpecial : 0);
    // Normalized tokens are matched, and handed to the decoder, in their normalized form.
    if (token.normalized && impl.normalizer)
      token.content = impl.normalizer->normalize(token.content);
    impl.decode_form[id] = token.content;
    (token.normalized ? impl.normalized_matcher : impl.raw_matcher).add(token);
  }
  // skip_special_tokens drops every id whose decoded string is a special token's content.
  for (size_t id = 0; id < impl.decode_form.size(); ++id) {
    if ((impl.id_flags[id] & Tokenizer::Impl::kIdExists) &&
        special_contents.contains(impl.decode_form[id]))
      impl.id_flags[id] |= Tokenizer::Impl::kIdSkipped;
  }
}

std::shared_ptr<Tokenizer::Impl> build(std::string_view text, std::string_view origin) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  impl->origin = std::string(origin);
  try {
    tokenizer_detail::TokenizerJson parsed = tokenizer_detail::parse_tokenizer_json(text);
    const Json& json = parsed.document;
    DSPARK_CHECK_KIND(io, json.is_object(), "the top level is not a JSON object");
    const Json null;
    auto section = [&](const char* name) -> const Json& {
      const auto it = json.find(name);
      return it == json.end() ? null : *it;
    };
    impl->normalizer = tokenizer_detail::make_normalizer(section("normalizer"));
    impl->pre_tokenizer = tokenizer_detail::make_pre_tokenizer(section("pre_tokenizer"));
    impl->model = std::make_unique<tokenizer_detail::BpeModel>(
        tokenizer_detail::field(json, "model", "tokenizer.json"), parsed);
    impl->decoder = tokenizer_detail::make_decoder_chain(section("decoder"));
    tokenizer_detail::parse_post_processor(section("post_processor"), impl->templates);
    int32_t max_id = impl->model->max_id();
    const Json& added = section("added_tokens");
    DSPARK_CHECK_KIND(io, added.is_null() || added.is_array(), "added_tokens is not an array");
    load_added_tokens(*impl, added.is_null() ? Json::array() : added, max_id);
  } catch (const Json::exception& e) {
    DSPARK_FAIL(io, "{}: unexpected tokenizer.json content: {}", origin, e.what());
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", origin, e.what()), e.expression(), e.file(),
                e.line());
  }
  for (const auto& t : impl->templates) {
    if (!t.empty() && !t.front().is_sequence && !t.front().ids.empty()) {
      impl->bos = t.front().ids.front();
      break;
    }
  }
  if (impl->bos < 0)
    impl->bos = first_special(
        *impl, {"<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<bos>", "<s>", "<|startoftext|>"});
  impl->eos = first_special(*impl, {"<|end_of_text|>", "<｜end▁of▁sentence｜>", "<eos>", "</s>",
                                    "<|endoftext|>", "<|im_end|>"});
  return impl;
}

// bos_token / eos_token of a tokenizer_config.json: a string or {"content": ...}.
int32_t config_token(const Tokenizer::Impl& impl, const Json& config, const char* name) {
  const auto it = config.find(name);
  if (it == config.end()) return -1;
  if (it->is_string()) return lookup(impl, it->get<std::string>());
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return lookup(impl, it->at("content").get<std::string>());
  return -1;
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json(std::string_view json, std::string_view origin) {
  return Tokenizer(build(json, origin));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const GgufTokenizerSpec spec = gguf_tokenizer_json(file);
  auto impl = build(spec.json, file.path().string());
  if (spec.bos >= 0) impl->bos = spec.bos;
  if (spec.eos >= 0) impl->eos = spec.eos;
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path)) {
    file = path / "tokenizer.json";
    if (!std::filesystem::exists(file)) file = path / "tokenizer.json.xz";
  }
  DSPARK_CHECK_KIND(io, std::filesystem::exists(file), "tokenizer file {} does not exist",
                    file.string());
  auto impl = build(read_file_maybe_xz(file), file.string());
  const std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_file)) {
    // Optional metadata: a broken config is ignored (the tokenizer itself is complete).
    const Json config = Json::parse(read_file_maybe_xz(config_file), nullptr, false);
    if (config.is_object()) {
      if (const int32_t bos = config_token(*impl, config, "bos_token"); bos >= 0) impl->bos = bos;
      if (const int32_t eos = config_token(*impl, config, "eos_token"); eos >= 0) impl->eos = eos;
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& impl = *impl_;
  const size_t bad = utf8::find_invalid(text);
  DSPARK_CHECK_KIND(invalid_input, bad == std::string_view::npos,
                    "text to encode is not valid UTF-8 (at byte {})", bad);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<tokenizer_detail::Piece> pieces;
  auto encode_text = [&](std::string_view part, bool at_start) {
    if (part.empty()) return;
    pieces.clear();
    pieces.push_back({std::string(part), at_start});
    if (impl.pre_tokenizer) impl.pre_tokenizer->pre_tokenize(pieces);
    for (const auto& piece : pieces) impl.model->tokenize(piece.text, ids);
  };

  std::vector<tokenizer_detail::Segment> raw, normalized;
  if (!text.empty()) impl.raw_matcher.split(text, raw);
  for (const auto& segment : raw) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    const std::string_view part = text.substr(segment.start, segment.end - segment.start);
    const bool at_start = segment.start == 0;
    const std::string norm =
        impl.normalizer ? impl.normalizer->normalize(std::string(part)) : std::string(part);
    if (impl.normalized_matcher.empty() || norm.empty()) {
      encode_text(norm, at_start);
      continue;
    }
    normalized.clear();
    impl.normalized_matcher.split(norm, normalized);
    for (const auto& sub : normalized) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
      } else {
        encode_text(std::string_view(norm).substr(sub.start, sub.end - sub.start),
                    at_start && sub.start == 0);
      }
    }
  }
  if (add_special_tokens) {
    for (const auto& t : impl.templates) {
      std::vector<int32_t> processed;
      processed.reserve(ids.size() + t.size());
      for (const auto& item : t) {
        const auto& source = item.is_sequence ? ids : item.ids;
        processed.insert(processed.end(), source.begin(), source.end());
      }
      ids = std::move(processed);
    }
  }
  return ids;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  return lookup(*impl_, token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_flags.size() ||
      !(impl_->id_flags[static_cast<size_t>(id)] & Impl::kIdExists))
    return {};
  return impl_->decode_form[static_cast<size_t>(id)];
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->id_flags.size());
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() &&
         (impl_->id_flags[static_cast<size_t>(id)] & Impl::kIdSpecial);
}

int32_t Tokenizer::bos_id() const {
  return impl_->bos;
}
int32_t Tokenizer::eos_id() const {
  return impl_->eos;
}
const std::string& Tokenizer::origin() const {
  return impl_->origin;
}

}  // namespace dspark
