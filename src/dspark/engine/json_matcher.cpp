#include "dspark/engine/json_matcher.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "dspark/core/error.h"

namespace dspark {
namespace {

const std::vector<std::string> kWordLiterals = {"true", "false", "null"};
constexpr uint8_t kWordFlag = 1;
constexpr uint8_t kIntegerFlag = 1;

// Object frame states.
enum : uint8_t { kObjOpen, kObjKey, kObjAfterKey, kObjAfterValue, kObjAfterComma };
// Array frame states.
enum : uint8_t { kArrOpen, kArrAfterValue };
// Number frame states; accepting: zero, int_digits, frac_digits, exp_digits.
enum : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp
};

bool is_ws(uint8_t c) {
  return c == ' ' || c == '\n';
}
bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
bool is_hex(uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool number_accepting(uint8_t st) {
  return st == kNumZero || st == kNumInt || st == kNumFrac || st == kNumExp;
}

// UTF-8 inside strings: false for a byte that cannot continue a valid sequence.
bool utf8_byte(uint8_t& pending, uint8_t c) {
  if (pending > 0) {
    if (c < 0x80 || c > 0xBF) return false;
    --pending;
    return true;
  }
  if (c < 0x80) return true;
  if (c >= 0xC2 && c <= 0xDF) {
    pending = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    pending = 2;
  } else if (c >= 0xF0 && c <= 0xF4) {
    pending = 3;
  } else {
    return false;
  }
  return true;
}

uint64_t low_bits(size_t n) {
  return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}

}  // namespace

JsonMatcher::JsonMatcher(const JsonSchema* schema) : schema_(schema) {
  DSPARK_CHECK(schema != nullptr && !schema->nodes.empty(), "JsonMatcher: no schema");
  push(Kind::value, schema->root);
}

JsonMatcher& JsonMatcher::operator=(const JsonMatcher& other) {
  schema_ = other.schema_;
  depth_ = other.depth_;
  ws_ = other.ws_;
  std::memcpy(stack_.data(), other.stack_.data(), sizeof(Frame) * static_cast<size_t>(depth_));
  return *this;
}

void JsonMatcher::state_key(std::string& out) const {
  // Field by field (a Frame's padding bytes are unspecified).
  out.clear();
  const auto put = [&out](const auto& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  put(static_cast<uint8_t>(depth_));
  put(ws_);
  for (int d = 0; d < depth_; ++d) {
    const Frame& f = stack_[static_cast<size_t>(d)];
    put(f.kind);
    put(f.st);
    put(f.utf8);
    put(f.flags);
    put(f.pos);
    put(f.node);
    put(f.value_node);
    put(f.seen);
    put(f.cand);
  }
}

bool JsonMatcher::push(Kind kind, int32_t node) {
  if (depth_ == kStack) return false;
  Frame& f = stack_[static_cast<size_t>(depth_++)];
  f = Frame{};
  f.kind = kind;
  f.node = node;
  return true;
}

const std::vector<std::string>& JsonMatcher::literals(const Frame& f) const {
  return (f.flags & kWordFlag) ? kWordLiterals
                               : schema_->nodes[static_cast<size_t>(f.node)].literals;
}

bool JsonMatcher::feed(std::string_view bytes) {
  for (const char c : bytes)
    if (!feed(static_cast<uint8_t>(c))) return false;
  return true;
}

bool JsonMatcher::feed(uint8_t c) {
  const bool ws = is_ws(c);
  if (ws && ws_ >= kMaxJsonWhitespace) {
    // Only strings and keys take more whitespace in a row.
    if (depth_ == 0) return false;
    const Frame& top = stack_[static_cast<size_t>(depth_ - 1)];
    if (top.kind != Kind::string && !(top.kind == Kind::object && top.st == kObjKey)) return false;
  }
  ws_ = ws ? static_cast<uint8_t>(ws_ + 1) : 0;
  while (depth_ > 0) {
    Frame& f = stack_[static_cast<size_t>(depth_ - 1)];
    Step s = Step::consumed;
    switch (f.kind) {
      case Kind::value:
        return start_value(f, c);
      case Kind::string:
        return string_byte(f, c);
      case Kind::object:
        return object_byte(f, c);
      case Kind::array:
        if (ws && f.st == kArrOpen) return true;
        if (ws && f.st == kArrAfterValue) return true;
        if (c == ']') {
          --depth_;
          return true;
        }
        if (f.st == kArrAfterValue) {
          return c == ',' && push(Kind::value, schema_->nodes[static_cast<size_t>(f.node)].items);
        }
        f.st = kArrAfterValue;
        if (!push(Kind::value, schema_->nodes[static_cast<size_t>(f.node)].items)) return false;
        continue;  // the byte starts the first item
      case Kind::number:
        s = number_byte(f, c);
        break;
      case Kind::literal:
        s = literal_byte(f, c);
        break;
    }
    if (s != Step::ended) return s == Step::consumed;
    --depth_;  // the number / literal ended before this byte: the parent takes it
  }
  return false;
}

bool JsonMatcher::start_value(Frame& f, uint8_t c) {
  if (is_ws(c)) return true;
  const JsonSchemaNode& n = schema_->nodes[static_cast<size_t>(f.node)];
  if (!n.literals.empty()) {
    f.kind = Kind::literal;
    f.cand = low_bits(n.literals.size());
    return literal_byte(f, c) == Step::consumed;
  }
  const int nesting = depth_;
  if (c == '{' && (n.types & kJsonObject)) {
    if (nesting > kMaxJsonNesting) return false;
    f.kind = Kind::object;
    f.st = kObjOpen;
    return true;
  }
  if (c == '[' && (n.types & kJsonArray)) {
    if (nesting > kMaxJsonNesting) return false;
    f.kind = Kind::array;
    f.st = kArrOpen;
    return true;
  }
  if (c == '"' && (n.types & kJsonString)) {
    f.kind = Kind::string;
    return true;
  }
  if ((c == '-' || is_digit(c)) && (n.types & (kJsonNumber | kJsonInteger))) {
    f.kind = Kind::number;
    f.st = kNumStart;
    f.flags = (n.types & kJsonNumber) ? 0 : kIntegerFlag;
    return number_byte(f, c) == Step::consumed;
  }
  const bool word =
      ((c == 't' || c == 'f') && (n.types & kJsonBoolean)) || (c == 'n' && (n.types & kJsonNull));
  if (!word) return false;
  f.kind = Kind::literal;
  f.flags = kWordFlag;
  f.cand = c == 'n' ? 4 : 3;
  return literal_byte(f, c) == Step::consumed;
}

bool JsonMatcher::string_byte(Frame& f, uint8_t c) {
  if (f.st == 1) {  // after a backslash
    if (c == 'u') {
      f.st = 2;
      return true;
    }
    f.st = 0;
    return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
           c == 't';
  }
  if (f.st >= 2) {  // \u and 4 hex digits
    if (!is_hex(c)) return false;
    f.st = f.st == 5 ? 0 : static_cast<uint8_t>(f.st + 1);
    return true;
  }
  if (f.utf8 == 0) {
    if (c == '"') {
      --depth_;
      return true;
    }
    if (c == '\\') {
      f.st = 1;
      return true;
    }
    if (c < 0x20) return false;
  }
  return utf8_byte(f.utf8, c);
}

bool JsonMatcher::can_add_key(const Frame& f) const {
  const JsonSchemaNode& n = schema_->nodes[static_cast<size_t>(f.node)];
  return n.additional >= 0 || (low_bits(n.property_names.size()) & ~f.seen) != 0;
}

bool JsonMatcher::begin_key(Frame& f) {
  if (!can_add_key(f)) return false;
  const JsonSchemaNode& n = schema_->nodes[static_cast<size_t>(f.node)];
  const uint64_t all = low_bits(n.property_names.size());
  f.st = kObjKey;
  f.pos = 0;
  f.utf8 = 0;
  f.cand = n.additional >= 0 ? all : all & ~f.seen;
  return true;
}

bool JsonMatcher::key_byte(Frame& f, uint8_t c) {
  const JsonSchemaNode& n = schema_->nodes[static_cast<size_t>(f.node)];
  if (c == '"' && f.utf8 == 0) {
    int matched = -1;
    for (size_t i = 0; i < n.property_names.size(); ++i)
      if (((f.cand >> i) & 1) && n.property_names[i].size() == f.pos) matched = static_cast<int>(i);
    if (matched >= 0) {
      const uint64_t bit = uint64_t{1} << matched;
      if (f.seen & bit) return false;  // each property once
      f.seen |= bit;
      f.value_node = n.property_nodes[static_cast<size_t>(matched)];
    } else {
      if (n.additional < 0) return false;
      f.value_node = n.additional;
    }
    f.st = kObjAfterKey;
    return true;
  }
  if (c == '\\' || c < 0x20) return false;
  if (!utf8_byte(f.utf8, c)) return false;
  uint64_t next = 0;
  for (size_t i = 0; i < n.property_names.size(); ++i) {
    if (!((f.cand >> i) & 1)) continue;
    const std::string& name = n.property_names[i];
    if (name.size() > f.pos && static_cast<uint8_t>(name[f.pos]) == c) next |= uint64_t{1} << i;
  }
  if (next == 0 && n.additional < 0) return false;
  f.cand = next;
  if (f.pos < 0xFFFF) ++f.pos;
  return true;
}

bool JsonMatcher::object_byte(Frame& f, uint8_t c) {
  if (f.st == kObjKey) return key_byte(f, c);
  if (is_ws(c)) return true;
  const JsonSchemaNode& n = schema_->nodes[static_cast<size_t>(f.node)];
  switch (f.st) {
    case kObjOpen:
    case kObjAfterValue:
      if (c == '}') {
        if ((n.required & ~f.seen) != 0) return false;
        --depth_;
        return true;
      }
      if (f.st == kObjOpen) return c == '"' && begin_key(f);
      if (c != ',' || !can_add_key(f)) return false;
      f.st = kObjAfterComma;
      return true;
    case kObjAfterComma:
      return c == '"' && begin_key(f);
    case kObjAfterKey: {
      if (c != ':') return false;
      f.st = kObjAfterValue;
      return push(Kind::value, f.value_node);
    }
    default:
      return false;
  }
}

JsonMatcher::Step JsonMatcher::number_byte(Frame& f, uint8_t c) {
  const bool integer = f.flags & kIntegerFlag;
  auto go = [&](uint8_t st) {
    f.st = st;
    return Step::consumed;
  };
  switch (f.st) {
    case kNumStart:
      if (c == '-') return go(kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (c == '0') return go(kNumZero);
      if (is_digit(c)) return go(kNumInt);
      return Step::rejected;
    case kNumInt:
      if (is_digit(c)) return go(kNumInt);
      [[fallthrough]];
    case kNumZero:
      if (!integer && c == '.') return go(kNumDot);
      if (!integer && (c == 'e' || c == 'E')) return go(kNumE);
      break;
    case kNumDot:
      return is_digit(c) ? go(kNumFrac) : Step::rejected;
    case kNumFrac:
      if (is_digit(c)) return go(kNumFrac);
      if (c == 'e' || c == 'E') return go(kNumE);
      break;
    case kNumE:
      if (c == '+' || c == '-') return go(kNumESign);
      [[fallthrough]];
    case kNumESign:
      return is_digit(c) ? go(kNumExp) : Step::rejected;
    case kNumExp:
      if (is_digit(c)) return go(kNumExp);
      break;
    default:
      return Step::rejected;
  }
  // A byte that does not continue the number: it ends here if it is complete (a number has no
  // closing delimiter; the parent judges the byte).
  return number_accepting(f.st) ? Step::ended : Step::rejected;
}

bool JsonMatcher::literal_exact(const Frame& f) const {
  const auto& lits = literals(f);
  for (size_t i = 0; i < lits.size(); ++i)
    if (((f.cand >> i) & 1) && lits[i].size() == f.pos) return true;
  return false;
}

JsonMatcher::Step JsonMatcher::literal_byte(Frame& f, uint8_t c) {
  const auto& lits = literals(f);
  uint64_t next = 0;
  for (size_t i = 0; i < lits.size(); ++i) {
    if (!((f.cand >> i) & 1)) continue;
    if (lits[i].size() > f.pos && static_cast<uint8_t>(lits[i][f.pos]) == c)
      next |= uint64_t{1} << i;
  }
  if (next != 0) {
    f.cand = next;
    ++f.pos;
    return Step::consumed;
  }
  return literal_exact(f) ? Step::ended : Step::rejected;
}

bool JsonMatcher::complete() const {
  if (depth_ == 0) return true;
  if (depth_ != 1) return false;
  const Frame& f = stack_[0];
  if (f.kind == Kind::number) return number_accepting(f.st);
  if (f.kind == Kind::literal) return literal_exact(f);
  return false;
}

// ---- TokenVocab ---------------------------------------------------------------------------------

TokenVocab::TokenVocab(const std::vector<std::string>& token_bytes)
    : bytes_(token_bytes), vocab_size_(static_cast<int32_t>(token_bytes.size())) {
  // A pointer trie first, then flattened breadth-first into CSR arrays.
  struct Node {
    std::map<uint8_t, uint32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Node> nodes(1);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& b = token_bytes[id];
    if (b.empty()) continue;
    max_len_ = std::max(max_len_, b.size());
    uint32_t n = 0;
    for (const char ch : b) {
      const auto c = static_cast<uint8_t>(ch);
      auto it = nodes[n].children.find(c);
      if (it == nodes[n].children.end()) {
        nodes.emplace_back();
        it = nodes[n].children.emplace(c, static_cast<uint32_t>(nodes.size() - 1)).first;
      }
      n = it->second;
    }
    nodes[n].tokens.push_back(static_cast<int32_t>(id));
  }
  // Breadth-first order: node ids in the CSR arrays.
  std::vector<uint32_t> order = {0}, index(nodes.size(), 0);
  for (size_t i = 0; i < order.size(); ++i)
    for (const auto& [c, child] : nodes[order[i]].children) {
      index[child] = static_cast<uint32_t>(order.size());
      order.push_back(child);
    }
  child_begin_.assign(1, 0);
  token_begin_.assign(1, 0);
  for (const uint32_t old : order) {
    for (const auto& [c, child] : nodes[old].children) {
      edge_byte_.push_back(c);
      edge_node_.push_back(index[child]);
    }
    child_begin_.push_back(static_cast<uint32_t>(edge_byte_.size()));
    tokens_.insert(tokens_.end(), nodes[old].tokens.begin(), nodes[old].tokens.end());
    token_begin_.push_back(static_cast<uint32_t>(tokens_.size()));
  }
}

bool JsonConstraint::is_eos(int32_t id) const {
  return std::find(eos.begin(), eos.end(), id) != eos.end();
}

bool TokenVocab::advance(JsonMatcher& m, int32_t id) const {
  if (id < 0 || id >= vocab_size_) return false;
  const std::string& b = bytes_[static_cast<size_t>(id)];
  return !b.empty() && m.feed(b);
}

void TokenVocab::allowed_tokens(const JsonMatcher& m, std::span<uint32_t> bits) const {
  DSPARK_CHECK(bits.size() * 32 >= static_cast<size_t>(vocab_size_),
               "allowed_tokens: {} mask words for {} tokens", bits.size(), vocab_size_);
  std::fill(bits.begin(), bits.end(), 0u);
  if (m.closed()) return;
  // Depth-first over the trie with one matcher per depth: states[d] is the state after the
  // d bytes of the current path.
  std::vector<JsonMatcher> states(max_len_ + 1, m);
  struct Pos {
    uint32_t edge, end;
  };
  std::vector<Pos> stack;
  stack.reserve(max_len_ + 1);
  stack.push_back({child_begin_[0], child_begin_[1]});
  while (!stack.empty()) {
    Pos& p = stack.back();
    if (p.edge == p.end) {
      stack.pop_back();
      continue;
    }
    const uint32_t e = p.edge++;
    const size_t d = stack.size();
    JsonMatcher& next = states[d];
    next = states[d - 1];
    if (!next.feed(edge_byte_[e])) continue;
    const uint32_t node = edge_node_[e];
    for (uint32_t t = token_begin_[node]; t < token_begin_[node + 1]; ++t) {
      const auto id = static_cast<uint32_t>(tokens_[t]);
      bits[id / 32] |= 1u << (id % 32);
    }
    if (child_begin_[node] < child_begin_[node + 1])
      stack.push_back({child_begin_[node], child_begin_[node + 1]});
  }
}

}  // namespace dspark
