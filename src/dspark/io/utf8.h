// UTF-8 helpers for the tokenizer: strict decoding, encoding, and lossy conversion of arbitrary
// bytes with the same replacement rule as Rust's String::from_utf8_lossy (one U+FFFD per maximal
// invalid subpart, as recommended by the Unicode standard), in one shot or as a stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dspark::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Decodes the code point starting at s[i] and advances i past it. Returns -1 for an invalid or
// truncated sequence (i then advances by one byte).
int32_t next(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of `cp` (must be a scalar value).
void append(std::string& out, char32_t cp);

// Byte offset of the first invalid sequence in `s`, or std::string_view::npos if it is valid.
size_t find_invalid(std::string_view s);

// Number of bytes of the UTF-8 sequence that starts with `lead` (1 for invalid lead bytes).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

// Streaming lossy decoder: bytes in, valid UTF-8 out. Output never contains half a character; an
// incomplete sequence is held until it completes, turns out invalid, or flush() is called.
// push(all bytes) + flush() == String::from_utf8_lossy(all bytes).
class LossyDecoder {
 public:
  void push(std::string_view bytes, std::string& out);
  void flush(std::string& out);
  bool has_pending() const { return n_pending_ > 0; }

 private:
  void push_byte(unsigned char b, std::string& out);
  unsigned char pending_[4] = {};
  size_t n_pending_ = 0;
  size_t n_needed_ = 0;
};

// String::from_utf8_lossy.
std::string to_valid_lossy(std::string_view bytes);

}  // namespace dspark::utf8
