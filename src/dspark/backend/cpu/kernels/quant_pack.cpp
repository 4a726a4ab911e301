// The interleaved layout of quant_pack.h: byte moves only (and Q8_0's +128).
#include "dspark/backend/cpu/kernels/quant_pack.h"

#include <cstring>

#include "dspark/core/error.h"

namespace dspark::cpu {
namespace {

// Where a block's parts lie: the f16 scales (d at 0, m at 2 when there is one), the quants.
struct Parts {
  int halves;   // f16 scales per block (1 or 2)
  int quants;   // bytes of quants per block (16 or 32)
  bool offset;  // values stored + 128 (Q8_0)
};

Parts parts_of(QuantType t) {
  switch (t) {
    case QuantType::q4_0:
      return {1, 16, false};
    case QuantType::q4_1:
      return {2, 16, false};
    case QuantType::q8_0:
      return {1, 32, true};
    default:
      break;
  }
  DSPARK_FAIL(unsupported, "quant_pack: {} has no interleaved layout", quant_type_name(t));
}

}  // namespace

bool quant_packable(QuantType t) {
  return t == QuantType::q4_0 || t == QuantType::q4_1 || t == QuantType::q8_0;
}

void pack_group_x8(QuantType t, const uint8_t* const rows[8], int64_t k, uint8_t* dst) {
  const Parts p = parts_of(t);
  const QuantBlock qb = quant_block(t);
  const int64_t nb = k / qb.elements;
  const int head = 2 * p.halves;
  const uint8_t flip = p.offset ? 0x80 : 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = dst + b * 8 * qb.bytes;
    for (int r = 0; r < 8; ++r) {
      const uint8_t* src = rows[r] ? rows[r] + b * qb.bytes : nullptr;
      for (int h = 0; h < p.halves; ++h) {
        uint8_t* o = out + 16 * h + 2 * r;
        if (src) {
          std::memcpy(o, src + 2 * h, 2);
        } else {
          o[0] = o[1] = 0;
        }
      }
      for (int c = 0; c < p.quants / 4; ++c)
        for (int i = 0; i < 4; ++i)
          out[8 * head + 32 * c + 4 * r + i] =
              src ? static_cast<uint8_t>(src[head + 4 * c + i] ^ flip) : flip;
    }
  }
}

void pack_rows_x8(QuantType t, const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t row_bytes = quant_row_bytes(t, k);
  const int64_t groups = n / 8;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* rows[8];
    for (int r = 0; r < 8; ++r) rows[r] = src + (8 * g + r) * row_bytes;
    pack_group_x8(t, rows, k, dst + 8 * g * row_bytes);
  }
  const int64_t done = 8 * groups * row_bytes;
  std::memcpy(dst + done, src + done, static_cast<size_t>((n - 8 * groups) * row_bytes));
}

void unpack_row_x8(QuantType t, const uint8_t* packed, int64_t n, int64_t k, int64_t row,
                   uint8_t* dst) {
  const int64_t row_bytes = quant_row_bytes(t, k);
  if (row >= n / 8 * 8) {
    std::memcpy(dst, packed + row * row_bytes, static_cast<size_t>(row_bytes));
    return;
  }
  const Parts p = parts_of(t);
  const QuantBlock qb = quant_block(t);
  const int64_t nb = k / qb.elements;
  const int head = 2 * p.halves;
  const uint8_t flip = p.offset ? 0x80 : 0;
  const uint8_t* group = packed + row / 8 * 8 * row_bytes;
  const int r = static_cast<int>(row % 8);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = group + b * 8 * qb.bytes;
    uint8_t* out = dst + b * qb.bytes;
    for (int h = 0; h < p.halves; ++h) std::memcpy(out + 2 * h, in + 16 * h + 2 * r, 2);
    for (int c = 0; c < p.quants / 4; ++c)
      for (int i = 0; i < 4; ++i)
        out[head + 4 * c + i] = static_cast<uint8_t>(in[8 * head + 32 * c + 4 * r + i] ^ flip);
  }
}

}  // namespace dspark::cpu
