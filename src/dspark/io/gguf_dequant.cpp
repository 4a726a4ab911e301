// GGUF tensor types -> f32: the plain floats here, the block formats by core/quant.h's reference
// dequantization (bit-identical to the gguf package's).
#include <cstring>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"
#include "dspark/io/gguf.h"

namespace dspark {
namespace {

float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(f16{bits});
}

void element_f32(const uint8_t* b, float* y) {
  std::memcpy(y, b, 4);
}
void element_f16(const uint8_t* b, float* y) {
  *y = half(b);
}
void element_bf16(const uint8_t* b, float* y) {
  uint16_t bits;
  std::memcpy(&bits, b, 2);
  *y = bf16_to_f32(bf16{bits});
}

using ElementFn = void (*)(const uint8_t*, float*);

ElementFn element_fn(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return &element_f32;
    case GgmlType::f16:
      return &element_f16;
    case GgmlType::bf16:
      return &element_bf16;
    default:
      return nullptr;
  }
}

}  // namespace

std::optional<QuantType> quant_type_of(GgmlType type) {
  switch (type) {
    case GgmlType::q4_0:
      return QuantType::q4_0;
    case GgmlType::q4_1:
      return QuantType::q4_1;
    case GgmlType::q5_0:
      return QuantType::q5_0;
    case GgmlType::q5_1:
      return QuantType::q5_1;
    case GgmlType::q8_0:
      return QuantType::q8_0;
    case GgmlType::q4_k:
      return QuantType::q4_k;
    case GgmlType::q5_k:
      return QuantType::q5_k;
    case GgmlType::q6_k:
      return QuantType::q6_k;
    default:
      return std::nullopt;
  }
}

GgmlType ggml_type_of(QuantType type) {
  for (GgmlType g : {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0,
                     GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k}) {
    if (quant_type_of(g) == type) return g;
  }
  DSPARK_FAIL(internal, "ggml_type_of: no ggml type for {}", quant_type_name(type));
}

bool ggml_type_dequantizable(GgmlType type) {
  return element_fn(type) != nullptr || quant_type_of(type).has_value();
}

void dequantize_to_f32(GgmlType type, const uint8_t* src, int64_t n, float* dst,
                       const std::string& what) {
  DSPARK_CHECK_KIND(unsupported, ggml_type_dequantizable(type),
                    "{} has type {}, which dspark cannot read (supported: F32, F16, BF16, Q4_0, "
                    "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                    what, ggml_type_name(type));
  const GgmlBlock block = *ggml_block(type);
  DSPARK_CHECK(n % block.elements == 0, "{}: {} elements are not whole {} blocks", what, n,
               ggml_type_name(type));
  const int64_t n_blocks = n / block.elements;
  const ElementFn element = element_fn(type);
  const std::optional<QuantType> quant = quant_type_of(type);
  ThreadPool::global().parallel_for(n_blocks, 4096, [&](int64_t begin, int64_t end) {
    if (quant) {
      dequantize_blocks(*quant, src + begin * block.bytes, end - begin,
                        dst + begin * block.elements);
      return;
    }
    for (int64_t i = begin; i < end; ++i) element(src + i * block.bytes, dst + i * block.elements);
  });
}

}  // namespace dspark
