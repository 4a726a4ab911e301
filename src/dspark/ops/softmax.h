// Row-wise softmax, log-softmax and argmax over the last dimension.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// out[r, :] = softmax(x[r, :])  x: [n, V] any float dtype (rows contiguous); out: [n, V] f32.
void softmax(Context& ctx, const Tensor& x, const Tensor& out);
// out[r, :] = log_softmax(x[r, :])  (same shapes / dtypes as softmax)
void log_softmax(Context& ctx, const Tensor& x, const Tensor& out);
// out[r] = the index of the largest x[r, :]; ties -> the smallest index; NaN is never chosen
// unless the whole row is NaN (then 0).  x: [n, V] any float dtype; out: i32 [n].
// index_map (i32 [V], optional): out[r] = index_map[that index] instead (e.g. a draft
// vocabulary's columns -> token ids).
void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map = Tensor{});

}  // namespace dspark
