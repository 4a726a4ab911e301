// Host-side conversion between float dtypes.
#pragma once

#include <cstdint>

#include "dspark/core/dtype.h"

namespace dspark {

// Converts `n` floats of `src` (host, possibly unaligned: safetensors data is packed) into `dst`
// (host, aligned) of another float dtype (round to nearest even; a plain copy for the same dtype).
void convert_host(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

}  // namespace dspark
