// Recursive-descent parser for the Jinja2 subset, with jinja2's grammar and precedence (lowest
// first): `x if c else y`, or, and, not, comparisons (chained; in, not in), + -, ~, * / // %,
// **, unary - +, then primaries with postfix `.attr`, `[key]`, `[a:b:c]`, calls, `| filter` and
// `is test`.
#include <algorithm>
#include <initializer_list>

#include "dspark/core/error.h"
#include "dspark/io/jinja_ast.h"
#include "dspark/io/jinja_lexer.h"

namespace dspark::jinja {
namespace {

constexpr int kMaxDepth = 200;

bool in_list(std::string_view s, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::shared_ptr<const Template> run() {
    auto t = std::make_shared<Template>();
    t->nodes = subparse({});
    return t;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::op && cur().text == op; }
  bool is_name(std::string_view n) const {
    return cur().type == TokenType::name && cur().text == n;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::data:
        return "template data";
      case TokenType::var_begin:
        return "'{{'";
      case TokenType::var_end:
        return "end of print statement";
      case TokenType::block_begin:
        return "'{%'";
      case TokenType::block_end:
        return "end of statement block";
      case TokenType::eof:
        return "end of template";
      case TokenType::string:
        return "string literal";
      default:
        return fmt::format("'{}'", t.text);
    }
  }

  [[noreturn]] void fail(std::string_view message) const {
    DSPARK_FAIL(io, "chat template line {}: {}", cur().line, message);
  }
  [[noreturn]] void unsupported(std::string_view what) const {
    DSPARK_FAIL(unsupported, "chat template line {}: {} is not supported", cur().line, what);
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != TokenType::name)
      fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::block_end) {
      fail(fmt::format("expected end of statement block, got {}", describe(cur())));
    }
    advance();
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("template nesting is too deep");
    }
    ~DepthGuard() { --p_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    Parser& p_;
  };

  // ---- statements ----
  static std::string expected_tags(std::initializer_list<std::string_view> tags) {
    std::string out;
    for (auto tag : tags) out += (out.empty() ? "'" : " or '") + std::string(tag) + "'";
    return out;
  }

  NodeList subparse(std::initializer_list<std::string_view> end_tags) {
    DepthGuard guard(*this);
    std::string saved_expected = std::move(expected_);
    expected_ = expected_tags(end_tags);
    NodeList nodes;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::eof) {
        if (end_tags.size() > 0)
          fail(fmt::format("unexpected end of template, expected {}", expected_));
        expected_ = std::move(saved_expected);
        return nodes;
      }
      if (t.type == TokenType::data) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::text;
        n->line = t.line;
        n->text = t.text;
        nodes.push_back(std::move(n));
        advance();
      } else if (t.type == TokenType::var_begin) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::output;
        n->line = t.line;
        advance();
        n->expr = parse_tuple();
        if (cur().type != TokenType::var_end) {
          fail(fmt::format("expected end of print statement, got {}", describe(cur())));
        }
        advance();
        nodes.push_back(std::move(n));
      } else if (t.type == TokenType::block_begin) {
        advance();
        if (cur().type == TokenType::name && in_list(cur().text, end_tags)) {
          expected_ = std::move(saved_expected);
          return nodes;
        }
        nodes.push_back(parse_statement());
      } else {
        fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // After subparse stopped at `{% endxxx`: consume the tag (and an optional trailing name).
  void end_tag(std::string_view name) {
    if (!skip_name(name)) fail(fmt::format("expected '{}'", name));
    expect_block_end();
  }

  NodePtr parse_statement() {
    if (cur().type != TokenType::name) fail("tag name expected");
    std::string tag = cur().text;
    auto n = std::make_unique<Node>();
    n->line = cur().line;
    if (tag == "if") return parse_if(std::move(n));
    if (tag == "for") return parse_for(std::move(n));
    if (tag == "set") return parse_set(std::move(n));
    if (tag == "macro") return parse_macro(std::move(n));
    if (tag == "with") return parse_with(std::move(n));
    if (tag == "filter") {
      advance();
      n->kind = NodeKind::filter;
      n->expr = parse_filter(nullptr, true);
      expect_block_end();
      n->body = subparse({"endfilter"});
      end_tag("endfilter");
      return n;
    }
    if (tag == "generation") {
      advance();
      expect_block_end();
      n->kind = NodeKind::generation;
      n->body = subparse({"endgeneration"});
      end_tag("endgeneration");
      return n;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      advance();
      expect_block_end();
      n->kind = tag == "break" ? NodeKind::break_ : NodeKind::continue_;
      return n;
    }
    if (in_list(tag, {"extends", "block", "include", "import", "from", "call", "autoescape", "do",
                      "trans", "pluralize"})) {
      unsupported(fmt::format("the '{{% {} %}}' tag", tag));
    }
    if (expected_.empty()) fail(fmt::format("unknown tag '{}'", tag));
    fail(fmt::format("unknown tag '{}', expected {}", tag, expected_));
  }

  NodePtr parse_if(NodePtr n) {
    n->kind = NodeKind::if_;
    advance();  // if
    while (true) {
      n->conds.push_back(parse_tuple(false, false));
      expect_block_end();
      n->bodies.push_back(subparse({"elif", "else", "endif"}));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        n->else_body = subparse({"endif"});
      }
      end_tag("endif");
      return n;
    }
  }

  NodePtr parse_for(NodePtr n) {
    n->kind = NodeKind::for_;
    advance();  // for
    n->target = parse_assign_target(false, {"in"});
    if (!skip_name("in")) fail(fmt::format("expected 'in', got {}", describe(cur())));
    n->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) n->filter = parse_expression();
    if (is_name("recursive")) unsupported("a recursive for loop");
    expect_block_end();
    ++loop_depth_;
    n->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      n->else_body = subparse({"endfor"});
    }
    end_tag("endfor");
    return n;
  }

  NodePtr parse_set(NodePtr n) {
    advance();  // set
    n->target = parse_assign_target(true, {});
    if (skip_op("=")) {
      n->kind = NodeKind::set;
      n->expr = parse_tuple();
      expect_block_end();
      return n;
    }
    n->kind = NodeKind::set_block;
    if (is_op("|")) n->expr = parse_filter(nullptr, false);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = subparse({"endset"});
    loop_depth_ = saved;
    end_tag("endset");
    return n;
  }

  NodePtr parse_macro(NodePtr n) {
    n->kind = NodeKind::macro;
    advance();  // macro
    n->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string param = expect_name();
      ExprPtr def;
      if (skip_op("="))
        def = parse_expression();
      else if (!n->params.empty() && n->params.back().second)
        fail("non-default argument follows default argument");
      n->params.emplace_back(std::move(param), std::move(def));
    }
    expect_op(")");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = subparse({"endmacro"});
    loop_depth_ = saved;
    if (!skip_name("endmacro")) fail("expected 'endmacro'");
    if (cur().type == TokenType::name) advance();  // {% endmacro name %}
    expect_block_end();
    return n;
  }

  NodePtr parse_with(NodePtr n) {
    n->kind = NodeKind::with;
    advance();  // with
    while (cur().type != TokenType::block_end) {
      if (!n->assignments.empty()) expect_op(",");
      Target t = parse_assign_target(false, {});
      expect_op("=");
      n->assignments.emplace_back(std::move(t), parse_expression());
    }
    expect_block_end();
    n->body = subparse({"endwith"});
    end_tag("endwith");
    return n;
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::var_end || t.type == TokenType::block_end ||
        t.type == TokenType::eof || (t.type == TokenType::op && t.text == ")")) {
      return true;
    }
    return t.type == TokenType::name && in_list(t.text, extra_end);
  }

  Target parse_assign_target(bool with_namespace,
                             std::initializer_list<std::string_view> extra_end) {
    Target t;
    if (with_namespace && cur().type == TokenType::name && peek().type == TokenType::op &&
        peek().text == ".") {
      t.names.push_back(expect_name());
      advance();  // .
      t.attr = expect_name();
      return t;
    }
    bool paren = skip_op("(");
    while (true) {
      t.names.push_back(expect_name());
      if (!is_op(",")) break;
      t.unpack = true;
      advance();
      if (paren ? is_op(")") : is_tuple_end(extra_end)) break;
    }
    if (paren) {
      expect_op(")");
      t.unpack = true;
    }
    for (const auto& name : t.names) {
      if (in_list(name, {"true", "false", "none", "True", "False", "None"})) {
        fail(fmt::format("can't assign to constant '{}'", name));
      }
    }
    return t;
  }

  // ---- expressions ----
  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true,
                      std::initializer_list<std::string_view> extra_end = {},
                      bool explicit_parentheses = false) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) {
        fail(fmt::format("expected an expression, got {}", describe(cur())));
      }
    }
    auto e = make(ExprKind::tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto e = make(ExprKind::cond, line);
      e->a = std::move(expr1);
      e->b = std::move(expr2);
      e->c = std::move(expr3);
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary_node(ExprKind kind, ExprPtr left, ExprPtr right, std::string name, int line) {
    auto e = make(kind, line);
    e->a = std::move(left);
    e->b = std::move(right);
    e->name = std::move(name);
    return e;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or"))
      left = binary_node(ExprKind::or_, std::move(left), parse_and(), "", line);
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and"))
      left = binary_node(ExprKind::and_, std::move(left), parse_not(), "", line);
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      int line = cur().line;
      advance();
      auto e = make(ExprKind::not_, line);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == TokenType::op && in_list(cur().text, {"==", "!=", "<", "<=", ">", ">="})) {
        ops.push_back(cur().text);
        advance();
      } else if (is_name("in")) {
        ops.push_back("in");
        advance();
      } else if (is_name("not") && peek().type == TokenType::name && peek().text == "in") {
        ops.push_back("not in");
        advance();
        advance();
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = make(ExprKind::compare, line);
    e->args.push_back(std::move(expr));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      advance();
      left = binary_node(ExprKind::binary, std::move(left), parse_concat(), op, line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::concat, line);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      advance();
      left = binary_node(ExprKind::binary, std::move(left), parse_pow(), op, line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary();
    while (skip_op("**")) {
      left = binary_node(ExprKind::binary, std::move(left), parse_unary(), "**", line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this);
    int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      bool neg = is_op("-");
      advance();
      node = make(neg ? ExprKind::neg : ExprKind::pos, line);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::name) {
      auto e = make(ExprKind::literal, line);
      if (in_list(t.text, {"true", "True"}))
        e->value = Value(true);
      else if (in_list(t.text, {"false", "False"}))
        e->value = Value(false);
      else if (in_list(t.text, {"none", "None"}))
        e->value = Value(nullptr);
      else {
        e->kind = ExprKind::name;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.type == TokenType::string) {
      std::string s;
      while (cur().type == TokenType::string) {
        s += cur().text;
        advance();
      }
      auto e = make(ExprKind::literal, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::integer || t.type == TokenType::floating) {
      auto e = make(ExprKind::literal, line);
      e->value = t.type == TokenType::integer ? Value(t.int_value) : Value(t.float_value);
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      advance();
      auto e = make(ExprKind::list, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      advance();
      auto e = make(ExprKind::dict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      expect_op("}");
      return e;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("["))
        node = parse_subscript(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|"))
        node = parse_filter(std::move(node), false);
      else if (is_name("is"))
        node = parse_test(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokenType::name) {
        auto e = make(ExprKind::getattr, line);
        e->a = std::move(node);
        e->name = expect_name();
        return e;
      }
      if (cur().type != TokenType::integer) fail("expected name or number");
      auto e = make(ExprKind::getitem, line);
      e->a = std::move(node);
      e->b = make(ExprKind::literal, line);
      e->b->value = Value(cur().int_value);
      advance();
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail("expected subscript expression");
    auto e = make(ExprKind::getitem, line);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = make(ExprKind::tuple, line);
      e->b->args = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) return start;
    }
    advance();  // first ':'
    auto e = make(ExprKind::slice, line);
    e->a = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) e->b = parse_expression();
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) e->c = parse_expression();
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) unsupported("*args / **kwargs in a call");
      if (cur().type == TokenType::name && peek().type == TokenType::op && peek().text == "=") {
        std::string key = expect_name();
        advance();  // =
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail("invalid syntax for function call expression");
        e.args.push_back(parse_expression());
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::call, cur().line);
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      if (!has_filter(name)) {
        DSPARK_FAIL(unsupported, "chat template line {}: the filter '{}' is not supported", line,
                    name);
      }
      auto e = make(ExprKind::filter, line);
      e->a = std::move(node);
      e->name = std::move(name);
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = cur().line;
    advance();  // is
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    if (!has_test(name)) {
      DSPARK_FAIL(unsupported, "chat template line {}: the test '{}' is not supported", line, name);
    }
    auto e = make(ExprKind::test, line);
    e->a = std::move(node);
    e->name = std::move(name);
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == TokenType::name || cur().type == TokenType::string ||
                cur().type == TokenType::integer || cur().type == TokenType::floating ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(ExprKind::not_, line);
    n->a = std::move(e);
    return n;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::string expected_;  // the end tags the innermost open block waits for
};

}  // namespace

std::shared_ptr<const Template> parse_template(std::string_view source) {
  return Parser(tokenize(source)).run();
}

}  // namespace dspark::jinja
