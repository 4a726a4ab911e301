#include "dspark/io/utf8.h"

namespace dspark::utf8 {
namespace {

// Valid range of the continuation byte at `index` (1-based) of a sequence led by `lead`.
bool continuation_ok(unsigned char lead, size_t index, unsigned char b) {
  if (index == 1) {
    switch (lead) {
      case 0xE0:
        return b >= 0xA0 && b <= 0xBF;
      case 0xED:
        return b >= 0x80 && b <= 0x9F;
      case 0xF0:
        return b >= 0x90 && b <= 0xBF;
      case 0xF4:
        return b >= 0x80 && b <= 0x8F;
      default:
        return b >= 0x80 && b <= 0xBF;
    }
  }
  return b >= 0x80 && b <= 0xBF;
}

}  // namespace

int32_t next(std::string_view s, size_t& i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) {
    ++i;
    return lead;
  }
  const size_t n = sequence_length(lead);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return -1;
  }
  int32_t cp = lead & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!continuation_ok(lead, k, b)) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t find_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Fast path over ASCII.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t at = i;
    if (next(s, i) < 0) return at;
  }
  return std::string_view::npos;
}

void LossyDecoder::push_byte(unsigned char b, std::string& out) {
  if (n_pending_ > 0) {
    if (continuation_ok(pending_[0], n_pending_, b)) {
      pending_[n_pending_++] = b;
      if (n_pending_ == n_needed_) {
        out.append(reinterpret_cast<const char*>(pending_), n_pending_);
        n_pending_ = 0;
      }
      return;
    }
    // The pending bytes are a maximal invalid subpart: one replacement, then retry `b` afresh.
    out.append(kReplacementUtf8);
    n_pending_ = 0;
  }
  if (b < 0x80) {
    out.push_back(static_cast<char>(b));
    return;
  }
  const size_t n = sequence_length(b);
  if (n == 1) {
    out.append(kReplacementUtf8);
    return;
  }
  pending_[0] = b;
  n_pending_ = 1;
  n_needed_ = n;
}

void LossyDecoder::push(std::string_view bytes, std::string& out) {
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80 && n_pending_ == 0) {
      out.push_back(c);
    } else {
      push_byte(b, out);
    }
  }
}

void LossyDecoder::flush(std::string& out) {
  if (n_pending_ > 0) out.append(kReplacementUtf8);
  n_pending_ = 0;
}

std::string to_valid_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  LossyDecoder decoder;
  decoder.push(bytes, out);
  decoder.flush(out);
  return out;
}

}  // namespace dspark::utf8
