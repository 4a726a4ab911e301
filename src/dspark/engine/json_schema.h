// A JSON-Schema subset compiled into the node table that JsonMatcher (engine/json_matcher.h)
// walks. Supported keywords:
//   type (a name or a list of names: object, array, string, number, integer, boolean, null),
//   properties, required, additionalProperties (true / false / absent), items, enum, const,
//   and the annotations title, description, $schema, $id, $comment, default, examples.
// Anything else (pattern, minimum, anyOf, $ref, ...) is refused: invalid_input naming the keyword
// and its path. A schema without "type" (and without enum / const) accepts any JSON value.
// Objects accept their properties in any order, each at most once; `}` only once every required
// property is present. Keys are plain strings (no backslash escapes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dspark {

enum JsonType : uint8_t {
  kJsonObject = 1,
  kJsonArray = 2,
  kJsonString = 4,
  kJsonNumber = 8,  // any number
  kJsonInteger = 16,
  kJsonBoolean = 32,
  kJsonNull = 64,
  kJsonAny = 127,
};

struct JsonSchemaNode {
  uint8_t types = kJsonAny;
  // enum / const: the values' compact serializations; when non-empty the value is one of them.
  std::vector<std::string> literals;
  // Objects: declared properties (name as it appears between the quotes) and their nodes.
  std::vector<std::string> property_names;
  std::vector<int32_t> property_nodes;
  uint64_t required = 0;   // bit i: property i is required
  int32_t additional = 0;  // node of undeclared properties (0: any value); -1: none allowed
  int32_t items = 0;       // arrays: node of the items
};

// Limits of the compiled form (the matcher's state is fixed-size).
inline constexpr int kMaxSchemaProperties = 64;  // per object
inline constexpr int kMaxSchemaLiterals = 64;    // enum values
inline constexpr int kMaxJsonNesting = 24;       // objects / arrays open at once

struct JsonSchema {
  // nodes[0] accepts any JSON value; nodes[root] is the document.
  std::vector<JsonSchemaNode> nodes;
  int32_t root = 0;

  // {"type": "json_object"}: any JSON object.
  static JsonSchema any_object();
  // Throws invalid_input naming the unsupported keyword or bad value (with its JSON pointer).
  static JsonSchema compile(const nlohmann::json& schema);
};

}  // namespace dspark
