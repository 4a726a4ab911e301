#include "dspark/engine/json_schema.h"

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"

namespace dspark {
namespace {

using json = nlohmann::json;

uint8_t type_bit(const std::string& name, const std::string& path) {
  if (name == "object") return kJsonObject;
  if (name == "array") return kJsonArray;
  if (name == "string") return kJsonString;
  if (name == "number") return kJsonNumber;
  if (name == "integer") return kJsonInteger;
  if (name == "boolean") return kJsonBoolean;
  if (name == "null") return kJsonNull;
  DSPARK_FAIL(invalid_input, "schema {}: unknown type \"{}\"", path, name);
}

// The types a JSON value has (an integral number is both an integer and a number).
uint8_t value_types(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return kJsonObject;
    case json::value_t::array:
      return kJsonArray;
    case json::value_t::string:
      return kJsonString;
    case json::value_t::boolean:
      return kJsonBoolean;
    case json::value_t::null:
      return kJsonNull;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return kJsonNumber | kJsonInteger;
    default:
      return kJsonNumber;
  }
}

bool is_annotation(const std::string& key) {
  return key == "title" || key == "description" || key == "$schema" || key == "$id" ||
         key == "$comment" || key == "default" || key == "examples";
}

class Compiler {
 public:
  std::vector<JsonSchemaNode> nodes;

  Compiler() { nodes.emplace_back(); }  // node 0: any value

  int32_t compile(const json& s, const std::string& path, int depth) {
    if (s.is_boolean()) {
      DSPARK_CHECK_KIND(invalid_input, s.get<bool>(), "schema {}: false accepts nothing", path);
      return 0;
    }
    DSPARK_CHECK_KIND(invalid_input, s.is_object(), "schema {}: must be an object", path);
    DSPARK_CHECK_KIND(invalid_input, depth <= kMaxJsonNesting,
                      "schema {}: nested deeper than {} levels", path, kMaxJsonNesting);
    for (const auto& [key, value] : s.items()) {
      if (is_annotation(key) || key == "type" || key == "properties" || key == "required" ||
          key == "additionalProperties" || key == "items" || key == "enum" || key == "const")
        continue;
      DSPARK_FAIL(invalid_input,
                  "schema {}: keyword \"{}\" is not supported (supported: type, properties, "
                  "required, additionalProperties, items, enum, const)",
                  path, key);
    }
    const auto index = static_cast<int32_t>(nodes.size());
    nodes.emplace_back();
    JsonSchemaNode node;
    node.types = 0;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        node.types = type_bit(t->get<std::string>(), path);
      } else {
        DSPARK_CHECK_KIND(invalid_input, t->is_array() && !t->empty(),
                          "schema {}/type: must be a type name or a list of them", path);
        for (const json& name : *t) {
          DSPARK_CHECK_KIND(invalid_input, name.is_string(),
                            "schema {}/type: must be a type name or a list of them", path);
          node.types |= type_bit(name.get<std::string>(), path + "/type");
        }
      }
      if (node.types & kJsonNumber) node.types &= static_cast<uint8_t>(~kJsonInteger);
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      node.types = kJsonObject;
    } else if (s.contains("items")) {
      node.types = kJsonArray;
    } else {
      node.types = kJsonAny & static_cast<uint8_t>(~kJsonInteger);
    }
    compile_literals(s, path, node);
    if (node.types & kJsonObject) compile_object(s, path, depth, node);
    if (node.types & kJsonArray) {
      if (auto it = s.find("items"); it != s.end()) {
        node.items = compile(*it, path + "/items", depth + 1);
      }
    }
    nodes[static_cast<size_t>(index)] = std::move(node);
    return index;
  }

 private:
  void compile_literals(const json& s, const std::string& path, JsonSchemaNode& node) {
    std::vector<const json*> values;
    if (auto c = s.find("const"); c != s.end()) values.push_back(&*c);
    if (auto e = s.find("enum"); e != s.end()) {
      DSPARK_CHECK_KIND(invalid_input, e->is_array() && !e->empty(),
                        "schema {}/enum: must be a non-empty array", path);
      DSPARK_CHECK_KIND(invalid_input, e->size() <= kMaxSchemaLiterals,
                        "schema {}/enum: more than {} values", path, kMaxSchemaLiterals);
      if (values.empty()) {
        for (const json& v : *e) values.push_back(&v);
      } else {
        // const and enum: the const value, if the enum holds it.
        bool found = false;
        for (const json& v : *e) found = found || v == *values[0];
        if (!found) values.clear();
      }
    } else if (values.empty()) {
      return;
    }
    const uint8_t allowed =
        node.types & kJsonNumber ? static_cast<uint8_t>(node.types | kJsonInteger) : node.types;
    for (const json* v : values) {
      if (!(value_types(*v) & allowed)) continue;
      std::string text = v->dump();
      bool dup = false;
      for (const auto& l : node.literals) dup = dup || l == text;
      if (!dup) node.literals.push_back(std::move(text));
    }
    DSPARK_CHECK_KIND(invalid_input, !node.literals.empty(),
                      "schema {}: no value of enum / const matches the type", path);
  }

  void compile_object(const json& s, const std::string& path, int depth, JsonSchemaNode& node) {
    node.additional = 0;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      DSPARK_CHECK_KIND(invalid_input, a->is_boolean(),
                        "schema {}/additionalProperties: only true or false is supported", path);
      if (!a->get<bool>()) node.additional = -1;
    }
    if (auto p = s.find("properties"); p != s.end()) {
      DSPARK_CHECK_KIND(invalid_input, p->is_object(), "schema {}/properties: must be an object",
                        path);
      DSPARK_CHECK_KIND(invalid_input, p->size() <= kMaxSchemaProperties,
                        "schema {}/properties: more than {} properties", path,
                        kMaxSchemaProperties);
      for (const auto& [name, sub] : p->items()) {
        for (const char c : name)
          DSPARK_CHECK_KIND(invalid_input,
                            c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20,
                            "schema {}/properties: property name \"{}\" needs escaping (not "
                            "supported)",
                            path, name);
        DSPARK_CHECK_KIND(invalid_input, !name.empty(),
                          "schema {}/properties: empty property names are not supported", path);
        const int32_t child = compile(sub, path + "/properties/" + name, depth + 1);
        node.property_names.push_back(name);
        node.property_nodes.push_back(child);
      }
    }
    if (auto r = s.find("required"); r != s.end()) {
      DSPARK_CHECK_KIND(invalid_input, r->is_array(), "schema {}/required: must be an array", path);
      for (const json& name : *r) {
        DSPARK_CHECK_KIND(invalid_input, name.is_string(),
                          "schema {}/required: must list property names", path);
        size_t i = 0;
        while (i < node.property_names.size() && node.property_names[i] != name.get<std::string>())
          ++i;
        DSPARK_CHECK_KIND(invalid_input, i < node.property_names.size(),
                          "schema {}/required: \"{}\" is not in properties (not supported)", path,
                          name.get<std::string>());
        node.required |= uint64_t{1} << i;
      }
    }
  }
};

}  // namespace

JsonSchema JsonSchema::any_object() {
  JsonSchema s;
  s.nodes.resize(2);
  s.nodes[1].types = kJsonObject;
  s.root = 1;
  return s;
}

JsonSchema JsonSchema::compile(const json& schema) {
  Compiler c;
  JsonSchema s;
  s.root = c.compile(schema, "#", 0);
  s.nodes = std::move(c.nodes);
  return s;
}

}  // namespace dspark
