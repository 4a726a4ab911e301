#include "dspark/io/chat_template.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "dspark/core/error.h"
#include "dspark/io/jinja_eval.h"
#include "dspark/io/json_util.h"

namespace dspark {

namespace fs = std::filesystem;
using jinja::Json;
using jinja::Value;

struct ChatTemplate::Impl {
  struct Compiled {
    std::string source;
    std::shared_ptr<const jinja::Template> tree;
    bool typed_content = false;  // loops over message content itself
  };
  std::optional<Compiled> main;
  std::optional<Compiled> tool_use;
  std::vector<std::pair<std::string, Value>> special_tokens;
};

namespace {

const std::string kEmpty;

ChatTemplate::Impl::Compiled compile(std::string source, const std::string& origin) {
  ChatTemplate::Impl::Compiled c;
  try {
    c.tree = jinja::parse_template(source);
  } catch (const Error& e) {
    if (origin.empty()) throw;
    throw Error(e.kind(), fmt::format("{}: {}", origin, e.what()), e.expression(), e.file(),
                e.line());
  }
  c.typed_content = jinja::iterates_over_content(*c.tree);
  c.source = std::move(source);
  return c;
}

std::string read_text_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  DSPARK_CHECK_KIND(io, in.good(), "{}: cannot open file", file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: a string or an AddedToken {"content": ...}.
std::optional<std::string> token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

std::tm parse_pinned_time(const Json& v) {
  std::tm tm{};
  std::string s = v.get<std::string>();
  int year, month, day, hour, minute, second;
  char sep;
  DSPARK_CHECK_KIND(invalid_input,
                    std::sscanf(s.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &year, &month, &day, &sep,
                                &hour, &minute, &second) == 7 &&
                        (sep == 'T' || sep == ' '),
                    "extra 'strftime_now' must be a time 'YYYY-MM-DDTHH:MM:SS', got '{}'", s);
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  std::time_t t = timegm(&tm);  // fills in the weekday and day of the year
  gmtime_r(&t, &tm);
  return tm;
}

// Joins the text parts of an OpenAI content list; rejects other part types.
void check_parts(const Json& parts, size_t index) {
  for (size_t j = 0; j < parts.size(); ++j) {
    const Json& part = parts[j];
    DSPARK_CHECK_KIND(invalid_input, part.is_object(), "messages[{}].content[{}] must be an object",
                      index, j);
    std::string type = part.contains("type") && part["type"].is_string()
                           ? part["type"].get<std::string>()
                           : std::string("<missing>");
    DSPARK_CHECK_KIND(invalid_input, type == "text",
                      "messages[{}].content[{}]: only text content parts are supported (got type "
                      "'{}')",
                      index, j, type);
    DSPARK_CHECK_KIND(invalid_input, part.contains("text") && part["text"].is_string(),
                      "messages[{}].content[{}] needs a string 'text'", index, j);
  }
}

std::string join_parts(const Json& parts) {
  std::string out;
  for (size_t j = 0; j < parts.size(); ++j) {
    if (j > 0) out += "\n";
    out += parts[j]["text"].get<std::string>();
  }
  return out;
}

Json normalize_message(const Json& message, size_t index, bool typed_content) {
  DSPARK_CHECK_KIND(invalid_input, message.is_object(), "messages[{}] must be an object", index);
  Json out = Json::object();
  for (const auto& [key, value] : message.items()) {
    if (value.is_null()) continue;
    if (key == "content" && value.is_array()) {
      check_parts(value, index);
      out[key] = typed_content ? value : Json(join_parts(value));
    } else {
      out[key] = value;
    }
  }
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    if (!out.contains(field)) continue;
    Json reasoning = out[field];
    Json aliased = Json::object();
    aliased["thinking"] = reasoning;
    for (const auto& [key, value] : out.items()) aliased[key] = value;
    aliased["reasoning_content"] = reasoning;
    return aliased;
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate() : impl_(std::make_shared<const Impl>()) {}
ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

ChatTemplate ChatTemplate::from_string(std::string source, std::string bos_token,
                                       std::string eos_token) {
  auto impl = std::make_shared<Impl>();
  impl->main = compile(std::move(source), "");
  if (!bos_token.empty()) impl->special_tokens.emplace_back("bos_token", Value(bos_token));
  if (!eos_token.empty()) impl->special_tokens.emplace_back("eos_token", Value(eos_token));
  return ChatTemplate(std::move(impl));
}

ChatTemplate ChatTemplate::from_tokenizer_config(const fs::path& file_or_dir) {
  fs::path dir = file_or_dir;
  fs::path config_file;
  if (fs::is_directory(file_or_dir)) {
    config_file = file_or_dir / "tokenizer_config.json";
  } else {
    config_file = file_or_dir;
    dir = file_or_dir.parent_path();
  }
  fs::path jinja_file = dir / "chat_template.jinja";
  bool has_jinja_file = fs::is_regular_file(jinja_file);
  auto impl = std::make_shared<Impl>();

  nlohmann::json config = nlohmann::json::object();
  if (fs::exists(config_file) || !has_jinja_file) config = read_json_file(config_file);
  DSPARK_CHECK_KIND(io, config.is_object(), "{}: expected a JSON object", config_file.string());
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (auto text = token_text(config[key])) impl->special_tokens.emplace_back(key, Value(*text));
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [key, value] : config["extra_special_tokens"].items()) {
      if (auto text = token_text(value)) impl->special_tokens.emplace_back(key, Value(*text));
    }
  }

  const std::string origin = config_file.string();
  if (has_jinja_file) {
    impl->main = compile(read_text_file(jinja_file), jinja_file.string());
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      impl->main = compile(ct.get<std::string>(), origin);
    } else {
      DSPARK_CHECK_KIND(io, ct.is_array(),
                        "{}: 'chat_template' must be a string or a list of {{name, template}}",
                        origin);
      std::vector<std::pair<std::string, std::string>> named;
      for (const auto& entry : ct) {
        DSPARK_CHECK_KIND(
            io,
            entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                entry.contains("template") && entry["template"].is_string(),
            "{}: each named chat template needs a string 'name' and 'template'", origin);
        named.emplace_back(entry["name"].get<std::string>(), entry["template"].get<std::string>());
      }
      std::string names;
      for (auto& [name, text] : named) {
        names += (names.empty() ? "" : ", ") + name;
        if (name == "default") impl->main = compile(text, origin + " (template 'default')");
        if (name == "tool_use") impl->tool_use = compile(text, origin + " (template 'tool_use')");
      }
      if (!impl->main && named.size() == 1) impl->main = compile(named[0].second, origin);
      DSPARK_CHECK_KIND(io, impl->main.has_value(),
                        "{}: the chat templates ({}) include none named 'default'", origin, names);
    }
  } else if (fs::is_regular_file(dir / "chat_template.json")) {
    nlohmann::json processor = read_json_file(dir / "chat_template.json");
    if (processor.is_object() && processor.contains("chat_template") &&
        processor["chat_template"].is_string()) {
      impl->main = compile(processor["chat_template"].get<std::string>(),
                           (dir / "chat_template.json").string());
    }
  }
  return ChatTemplate(std::move(impl));
}

bool ChatTemplate::has_template() const {
  return impl_->main.has_value();
}

const std::string& ChatTemplate::source() const {
  return impl_->main ? impl_->main->source : kEmpty;
}

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  return render_ordered(Json(messages), add_generation_prompt, Json(extra));
}

std::string ChatTemplate::render_ordered(const Json& messages, bool add_generation_prompt,
                                         const Json& extra) const {
  DSPARK_CHECK_KIND(unsupported, has_template(), "this model has no chat template");
  DSPARK_CHECK_KIND(invalid_input, messages.is_array(), "messages must be a JSON array");
  DSPARK_CHECK_KIND(invalid_input, !messages.empty(),
                    "cannot apply a chat template to an empty conversation");
  DSPARK_CHECK_KIND(invalid_input, extra.is_object(), "extra template variables must be an object");

  bool with_tools = extra.contains("tools") && !extra["tools"].is_null();
  const Impl::Compiled& tmpl = (with_tools && impl_->tool_use) ? *impl_->tool_use : *impl_->main;

  Json normalized = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    normalized.push_back(normalize_message(messages[i], i, tmpl.typed_content));
  }

  jinja::GlobalOptions options;
  std::vector<std::pair<std::string, Value>> vars = impl_->special_tokens;
  Value tools(nullptr), documents(nullptr);
  for (const auto& [key, value] : extra.items()) {
    DSPARK_CHECK_KIND(invalid_input, key != "messages" && key != "add_generation_prompt",
                      "'{}' cannot be passed as an extra template variable", key);
    if (key == "strftime_now" && value.is_string()) {
      options.now = parse_pinned_time(value);
    } else if (key == "tools") {
      tools = jinja::from_json(value);
    } else if (key == "documents") {
      documents = jinja::from_json(value);
    } else {
      vars.emplace_back(key, jinja::from_json(value));
    }
  }
  vars.emplace_back("messages", jinja::from_json(normalized));
  vars.emplace_back("tools", std::move(tools));
  vars.emplace_back("documents", std::move(documents));
  vars.emplace_back("add_generation_prompt", Value(add_generation_prompt));
  return jinja::render(*tmpl.tree, vars, options);
}

std::string render_plain_chat(const nlohmann::json& messages, bool add_generation_prompt) {
  DSPARK_CHECK_KIND(invalid_input, messages.is_array(), "messages must be a JSON array");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    DSPARK_CHECK_KIND(invalid_input, m.is_object() && m.contains("role") && m["role"].is_string(),
                      "messages[{}] needs a string 'role'", i);
    std::string content;
    if (m.contains("content")) {
      const auto& c = m["content"];
      if (c.is_string()) {
        content = c.get<std::string>();
      } else if (c.is_array()) {
        Json parts(c);
        check_parts(parts, i);
        content = join_parts(parts);
      } else {
        DSPARK_CHECK_KIND(invalid_input, c.is_null(),
                          "messages[{}].content must be a string, a list of parts or null", i);
      }
    }
    out += m["role"].get<std::string>() + ": " + content + "\n";
  }
  if (add_generation_prompt) out += "assistant: ";
  return out;
}

}  // namespace dspark
