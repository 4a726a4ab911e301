// The syntax tree of a parsed chat template (jinja_parser.cpp builds it, jinja_eval.cpp runs
// it). Expressions mirror jinja2's nodes; precedence is resolved by the parser.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspark/io/jinja_value.h"

namespace dspark::jinja {

struct Expr;
struct Node;
using ExprPtr = std::unique_ptr<Expr>;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class ExprKind {
  literal,  // value
  name,     // name
  list,     // args: items
  tuple,    // args: items
  dict,     // args: key0, value0, key1, value1, ...
  getattr,  // a.name
  getitem,  // a[b]
  slice,    // a, b, c = start, stop, step (each may be null); only as a getitem key
  call,     // a(args, kwargs)
  filter,   // a | name(args, kwargs); a is null inside {% filter %} blocks
  test,     // a is name(args, kwargs)
  not_,     // not a
  neg,      // -a
  pos,      // +a
  binary,   // a <name> b, name one of + - * / // % **
  concat,   // args[0] ~ args[1] ~ ...
  compare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
  and_,     // a and b
  or_,      // a or b
  cond,     // a if b else c (c may be null)
};

struct Expr {
  ExprKind kind = ExprKind::literal;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  ExprPtr a, b, c;
};

// The left side of `{% set %}`, `{% for %}` and `{% with %}`: a name, a tuple of names to unpack,
// or a namespace attribute (`ns.x`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: names[0].attr
};

enum class NodeKind {
  text,       // text
  output,     // {{ expr }}
  if_,        // conds[i] -> bodies[i], else_body
  for_,       // for target in expr [if filter]: body, else_body
  set,        // set target = expr
  set_block,  // set target [| filters in expr]: body
  macro,      // macro name(params): body
  break_,
  continue_,
  with,        // with assignments: body
  filter,      // filter expr (a filter chain over the body): body
  generation,  // transformers' {% generation %}: body rendered as-is
};

struct Node {
  NodeKind kind = NodeKind::text;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conds;
  std::vector<NodeList> bodies;
  NodeList body;
  NodeList else_body;
  Target target;
  ExprPtr filter;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters, default or null
  std::vector<std::pair<Target, ExprPtr>> assignments;  // {% with %}
};

struct Template {
  NodeList nodes;
};

// Parses template source into a tree. Throws ErrorKind::io for syntax errors and
// ErrorKind::unsupported (naming the construct) for valid Jinja that we do not implement:
// template inheritance and inclusion, {% call %}, recursive loops, unknown filters or tests.
std::shared_ptr<const Template> parse_template(std::string_view source);

// Whether a filter / test of this name exists (is implemented), for the parser's checks.
bool has_filter(std::string_view name);
bool has_test(std::string_view name);

}  // namespace dspark::jinja
