#include "dspark/io/jinja_eval.h"

#include <memory>
#include <unordered_map>

#include "dspark/core/error.h"

namespace dspark::jinja {
namespace {

constexpr int kMaxCallDepth = 200;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Renderer {
 public:
  explicit Renderer(const GlobalOptions& options) : options_(options) {}

  std::string run(const Template& t, ScopePtr root) {
    root_ = std::move(root);
    std::string out;
    exec(t.nodes, out, root_);
    return out;
  }

  int line() const { return line_; }

 private:
  enum class Flow { normal, break_loop, continue_loop };

  static ScopePtr child_of(const ScopePtr& parent) {
    auto s = std::make_shared<Scope>();
    s->parent = parent;
    return s;
  }

  Flow exec(const NodeList& nodes, std::string& out, const ScopePtr& scope) {
    for (const auto& n : nodes) {
      Flow f = exec_node(*n, out, scope);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec_node(const Node& n, std::string& out, const ScopePtr& scope) {
    line_ = n.line;
    switch (n.kind) {
      case NodeKind::text:
        out += n.text;
        return Flow::normal;
      case NodeKind::output:
        out += to_str(eval(*n.expr, scope));
        return Flow::normal;
      case NodeKind::if_:
        for (size_t i = 0; i < n.conds.size(); ++i) {
          if (truthy(eval(*n.conds[i], scope))) return exec(n.bodies[i], out, scope);
        }
        return exec(n.else_body, out, scope);
      case NodeKind::for_:
        return exec_for(n, out, scope);
      case NodeKind::set:
        assign(n.target, eval(*n.expr, scope), scope);
        return Flow::normal;
      case NodeKind::set_block:
      case NodeKind::filter: {
        std::string body;
        exec(n.body, body, child_of(scope));
        Value v(std::move(body));
        if (n.expr) v = eval_filters(*n.expr, v, scope);
        if (n.kind == NodeKind::set_block)
          assign(n.target, std::move(v), scope);
        else
          out += to_str(v);
        return Flow::normal;
      }
      case NodeKind::macro:
        scope->vars[n.name] = make_macro(n, scope);
        return Flow::normal;
      case NodeKind::break_:
        return Flow::break_loop;
      case NodeKind::continue_:
        return Flow::continue_loop;
      case NodeKind::with: {
        ScopePtr inner = child_of(scope);
        for (const auto& [target, expr] : n.assignments) assign(target, eval(*expr, scope), inner);
        return exec(n.body, out, inner);
      }
      case NodeKind::generation:
        return exec(n.body, out, child_of(scope));
    }
    return Flow::normal;
  }

  Value loop_value(const std::vector<Value>& items, size_t i) {
    auto n = static_cast<int64_t>(items.size());
    auto k = static_cast<int64_t>(i);
    DictData d;
    d.set(Value("index0"), Value(k));
    d.set(Value("index"), Value(k + 1));
    d.set(Value("revindex0"), Value(n - k - 1));
    d.set(Value("revindex"), Value(n - k));
    d.set(Value("first"), Value(k == 0));
    d.set(Value("last"), Value(k == n - 1));
    d.set(Value("length"), Value(n));
    d.set(Value("depth0"), Value(0));
    d.set(Value("depth"), Value(1));
    if (i > 0) d.set(Value("previtem"), items[i - 1]);
    if (i + 1 < items.size()) d.set(Value("nextitem"), items[i + 1]);
    d.set(Value("cycle"), Value::callable("loop.cycle", [k](CallArgs& args) -> Value {
            if (args.positional.empty()) {
              DSPARK_FAIL(invalid_input, "no items for cycling given");
            }
            return args.positional[static_cast<size_t>(k) % args.positional.size()];
          }));
    return Value::dict(std::move(d));
  }

  Flow exec_for(const Node& n, std::string& out, const ScopePtr& scope) {
    std::vector<Value> items = iterate(eval(*n.expr, scope));
    if (n.filter) {
      std::vector<Value> kept;
      for (auto& item : items) {
        ScopePtr probe = child_of(scope);
        assign(n.target, item, probe);
        if (truthy(eval(*n.filter, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(n.else_body, out, scope);
    for (size_t i = 0; i < items.size(); ++i) {
      ScopePtr iteration = child_of(scope);
      assign(n.target, items[i], iteration);
      iteration->vars["loop"] = loop_value(items, i);
      if (exec(n.body, out, iteration) == Flow::break_loop) break;
    }
    return Flow::normal;
  }

  Value lookup(const std::string& name, const ScopePtr& scope) const {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return global_value(name, options_);
  }

  void assign(const Target& t, Value value, const ScopePtr& scope) {
    if (!t.attr.empty()) {
      Value ns = lookup(t.names[0], scope);
      if (!ns.is_ns()) {
        DSPARK_FAIL(invalid_input, "cannot assign attribute on non-namespace object");
      }
      if (t.attr[0] == '_') {
        DSPARK_FAIL(invalid_input,
                    "Chat templates cannot store underscore-prefixed attributes on a namespace");
      }
      ns.as_ns().set(Value(t.attr), std::move(value));
      return;
    }
    if (!t.unpack) {
      scope->vars[t.names[0]] = std::move(value);
      return;
    }
    std::vector<Value> items = iterate(value);
    if (items.size() != t.names.size()) {
      if (items.size() < t.names.size()) {
        DSPARK_FAIL(invalid_input, "not enough values to unpack (expected {}, got {})",
                    t.names.size(), items.size());
      }
      DSPARK_FAIL(invalid_input, "too many values to unpack (expected {})", t.names.size());
    }
    for (size_t i = 0; i < items.size(); ++i) scope->vars[t.names[i]] = std::move(items[i]);
  }

  Value make_macro(const Node& n, const ScopePtr& scope) {
    const Node* node = &n;
    std::weak_ptr<Scope> definition = scope;  // weak: the scope holds the macro
    return Value::callable(n.name, [this, node, definition](CallArgs& args) -> Value {
      CallGuard guard(*this);
      ScopePtr parent = definition.lock();
      ScopePtr local = child_of(parent ? parent : root_);
      const auto& params = node->params;
      if (args.positional.size() > params.size()) {
        DSPARK_FAIL(invalid_input, "macro '{}' takes not more than {} argument(s)", node->name,
                    params.size());
      }
      std::vector<const Value*> given(params.size(), nullptr);
      for (size_t i = 0; i < args.positional.size(); ++i) given[i] = &args.positional[i];
      for (const auto& [key, value] : args.keyword) {
        size_t i = 0;
        while (i < params.size() && params[i].first != key) ++i;
        if (i == params.size()) {
          DSPARK_FAIL(invalid_input, "macro '{}' takes no keyword argument '{}'", node->name, key);
        }
        given[i] = &value;
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const auto& [name, def] = params[i];
        if (given[i])
          local->vars[name] = *given[i];
        else if (def)
          local->vars[name] = eval(*def, local);
        else
          local->vars[name] =
              Value::undefined(fmt::format("parameter '{}' was not provided", name));
      }
      std::string out;
      exec(node->body, out, local);
      return Value(std::move(out));
    });
  }

  struct CallGuard {
    explicit CallGuard(Renderer& r) : r_(r) {
      if (++r_.call_depth_ > kMaxCallDepth) {
        --r_.call_depth_;
        DSPARK_FAIL(invalid_input, "maximum recursion depth exceeded in a chat template macro");
      }
    }
    ~CallGuard() { --r_.call_depth_; }
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;
    Renderer& r_;
  };

  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& a : e.args) args.positional.push_back(eval(*a, scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  // A filter chain whose innermost input is `input` ({% filter %} and {% set %} blocks).
  Value eval_filters(const Expr& e, const Value& input, const ScopePtr& scope) {
    if (e.kind != ExprKind::filter) return eval(e, scope);
    Value base = e.a ? eval_filters(*e.a, input, scope) : input;
    CallArgs args = eval_args(e, scope);
    return apply_filter(e.name, base, args);
  }

  bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    int c = compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    line_ = e.line;
    switch (e.kind) {
      case ExprKind::literal:
        return e.value;
      case ExprKind::name:
        return lookup(e.name, scope);
      case ExprKind::list:
      case ExprKind::tuple: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return Value::list(std::move(items), e.kind == ExprKind::tuple);
      }
      case ExprKind::dict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          d.set(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::getattr:
        return get_attribute(eval(*e.a, scope), e.name);
      case ExprKind::getitem: {
        Value obj = eval(*e.a, scope);
        if (e.b->kind == ExprKind::slice) {
          const Expr& s = *e.b;
          auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value(nullptr); };
          return get_slice(obj, part(s.a), part(s.b), part(s.c));
        }
        return get_item(obj, eval(*e.b, scope));
      }
      case ExprKind::slice:
        DSPARK_FAIL(io, "a slice outside of a subscript");
      case ExprKind::call: {
        Value callee = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_callable()) {
          DSPARK_FAIL(invalid_input, "'{}' object is not callable", type_name(callee));
        }
        Value result = callee.as_callable().fn(args);
        line_ = e.line;
        return result;
      }
      case ExprKind::filter: {
        Value input = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        line_ = e.line;
        return apply_filter(e.name, input, args);
      }
      case ExprKind::test: {
        Value v = eval(*e.a, scope);
        CallArgs args = eval_args(e, scope);
        line_ = e.line;
        return Value(apply_test(e.name, v, args));
      }
      case ExprKind::not_:
        return Value(!truthy(eval(*e.a, scope)));
      case ExprKind::neg:
        return unary_op("-", eval(*e.a, scope));
      case ExprKind::pos:
        return unary_op("+", eval(*e.a, scope));
      case ExprKind::binary: {
        Value a = eval(*e.a, scope);
        Value b = eval(*e.b, scope);
        line_ = e.line;
        return binary_op(e.name, a, b);
      }
      case ExprKind::concat: {
        std::string out;
        for (const auto& a : e.args) out += to_str(eval(*a, scope));
        return Value(std::move(out));
      }
      case ExprKind::compare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          line_ = e.line;
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::and_: {
        Value left = eval(*e.a, scope);
        return truthy(left) ? eval(*e.b, scope) : left;
      }
      case ExprKind::or_: {
        Value left = eval(*e.a, scope);
        return truthy(left) ? left : eval(*e.b, scope);
      }
      case ExprKind::cond:
        if (truthy(eval(*e.b, scope))) return eval(*e.a, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was "
            "defined.",
            e.line));
    }
    return Value();
  }

  const GlobalOptions& options_;
  ScopePtr root_;
  int line_ = 0;
  int call_depth_ = 0;
};

bool is_content_access(const Expr& e) {
  if (e.kind == ExprKind::getattr) return e.name == "content";
  if (e.kind == ExprKind::getitem && e.b && e.b->kind == ExprKind::literal) {
    return e.b->value.is_string() && e.b->value.as_string() == "content";
  }
  return false;
}

bool nodes_iterate_content(const NodeList& nodes) {
  for (const auto& n : nodes) {
    if (n->kind == NodeKind::for_ && is_content_access(*n->expr)) return true;
    if (nodes_iterate_content(n->body) || nodes_iterate_content(n->else_body)) return true;
    for (const auto& b : n->bodies)
      if (nodes_iterate_content(b)) return true;
  }
  return false;
}

}  // namespace

std::string render(const Template& t, const std::vector<std::pair<std::string, Value>>& variables,
                   const GlobalOptions& options) {
  auto root = std::make_shared<Scope>();
  for (const auto& [k, v] : variables) root->vars[k] = v;
  Renderer r(options);
  try {
    return r.run(t, root);
  } catch (const RaisedByTemplate& raised) {
    DSPARK_FAIL(invalid_input, "{}", raised.message);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("chat template line {}: {}", r.line(), e.what()),
                e.expression(), e.file(), e.line());
  }
}

bool iterates_over_content(const Template& t) {
  return nodes_iterate_content(t.nodes);
}

}  // namespace dspark::jinja
