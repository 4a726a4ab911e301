#include "dspark/io/tokenizer_unicode.h"

#include <algorithm>
#include <array>
#include <vector>

#include "dspark/io/utf8.h"

namespace dspark::unicode {
namespace {

namespace t = unicode_tables;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const t::Decomposition* find_decomposition(char32_t cp) {
  const auto* begin = t::kDecompositions;
  const auto* end = begin + t::kDecompositionCount;
  const auto* it = std::lower_bound(
      begin, end, cp, [](const t::Decomposition& d, char32_t c) { return d.code_point < c; });
  return (it != end && it->code_point == cp) ? it : nullptr;
}

char32_t compose_pair(char32_t a, char32_t b) {
  // Hangul: L + V -> LV, LV + T -> LVT.
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* begin = t::kCompositions;
  const auto* end = begin + t::kCompositionCount;
  const auto* it =
      std::lower_bound(begin, end, std::pair{a, b}, [](const t::Composition& c, auto k) {
        return c.first < k.first || (c.first == k.first && c.second < k.second);
      });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Code points for which NFC/NFD may change the text (decomposable, non-starter, or the second
// half of a composition): a bitmap over the BMP, a sorted list above it.
struct WorkSet {
  std::vector<uint64_t> bmp = std::vector<uint64_t>(65536 / 64, 0);
  std::vector<char32_t> astral;
  WorkSet() {
    auto add = [&](char32_t cp) {
      if (cp < 65536) {
        bmp[cp >> 6] |= uint64_t{1} << (cp & 63);
      } else {
        astral.push_back(cp);
      }
    };
    for (size_t i = 0; i < t::kCccRangeCount; ++i)
      for (char32_t cp = t::kCccRanges[i].first; cp <= t::kCccRanges[i].last; ++cp) add(cp);
    for (size_t i = 0; i < t::kDecompositionCount; ++i) add(t::kDecompositions[i].code_point);
    for (size_t i = 0; i < t::kCompositionCount; ++i) add(t::kCompositions[i].second);
    for (char32_t cp = kVBase; cp < kVBase + kVCount; ++cp) add(cp);
    for (char32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) add(cp);
    for (char32_t cp = kSBase; cp < kSBase + kSCount; ++cp) add(cp);
    std::sort(astral.begin(), astral.end());
  }
  bool contains(char32_t cp) const {
    if (cp < 65536) return (bmp[cp >> 6] >> (cp & 63)) & 1;
    return std::binary_search(astral.begin(), astral.end(), cp);
  }
};

const WorkSet& work_set() {
  static const WorkSet set;
  return set;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const auto* d = find_decomposition(cp)) {
    out.insert(out.end(), t::kDecompPool + d->offset, t::kDecompPool + d->offset + d->length);
  } else {
    out.push_back(cp);
  }
}

// Full canonical decomposition and canonical ordering (stable sort of each run of non-starters).
std::vector<char32_t> decompose_and_order(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const int32_t cp = utf8::next(text, i);
    decompose(static_cast<char32_t>(cp < 0 ? utf8::kReplacement : cp), cps);
  }
  size_t run = 0;
  while (run < cps.size()) {
    if (combining_class(cps[run]) == 0) {
      ++run;
      continue;
    }
    size_t end = run;
    while (end < cps.size() && combining_class(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(run),
                     cps.begin() + static_cast<std::ptrdiff_t>(end), [](char32_t a, char32_t b) {
                       return combining_class(a) < combining_class(b);
                     });
    run = end;
  }
  return cps;
}

bool needs_work(std::string_view text) {
  const WorkSet& set = work_set();
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0xC3) {  // below U+00C0: never changes
      ++i;
      continue;
    }
    const int32_t cp = utf8::next(text, i);
    if (cp < 0 || set.contains(static_cast<char32_t>(cp))) return true;
  }
  return false;
}

}  // namespace

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = t::kCccRanges;
  const auto* end = begin + t::kCccRangeCount;
  const auto* it = std::upper_bound(begin, end, cp,
                                    [](char32_t c, const t::CccRange& r) { return c < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::string nfd(std::string_view text) {
  if (!needs_work(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (const char32_t cp : decompose_and_order(text)) utf8::append(out, cp);
  return out;
}

std::string nfc(std::string_view text) {
  if (!needs_work(text)) return std::string(text);
  std::vector<char32_t> cps = decompose_and_order(text);
  if (cps.empty()) return {};
  // Canonical composition (UAX #15): a character combines with the last starter unless a
  // character between them has class 0 or a class >= its own.
  size_t starter = 0;
  int last_class = combining_class(cps[0]);
  if (last_class != 0) last_class = 256;  // nothing composes with a leading non-starter
  size_t n_out = 1;
  for (size_t i = 1; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    const int cls = combining_class(cp);
    const char32_t composite = compose_pair(cps[starter], cp);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) starter = n_out;
    last_class = cls;
    cps[n_out++] = cp;
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < n_out; ++i) utf8::append(out, cps[i]);
  return out;
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view category_delta(std::string_view name) {
  for (size_t i = 0; i < t::kCategoryDeltaCount; ++i)
    if (name == t::kCategoryDeltas[i].name) return t::kCategoryDeltas[i].ranges;
  return {};
}

}  // namespace dspark::unicode
