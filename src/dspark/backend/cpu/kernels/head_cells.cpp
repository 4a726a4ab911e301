// CPU kernels of the DSpark head cells (contract: ops/head_cells.h). One task per row; values
// go through f32.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

template <typename T>
float load(const Tensor& t, int64_t r, int64_t c) {
  return to_f32(row_ptr<const T>(t, r)[c]);
}

template <typename T>
void store(const Tensor& t, int64_t r, int64_t c, float v) {
  row_ptr<T>(t, r)[c] = from_f32<T>(v);
}

}  // namespace

void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out) {
  const int64_t n = gate.size(0), cols = gate.size(1);
  dispatch_float(gate.dtype(), [&]<typename TG>(TypeTag<TG>) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < cols; ++c)
              store<TO>(out, r, c, sigmoid(load<TG>(gate, r, c)) * load<TX>(x, r, c));
        });
      });
    });
  });
}

void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out) {
  const int64_t n = state.size(0), rank = state.size(1);
  dispatch_float(proj.dtype(), [&]<typename TP>(TypeTag<TP>) {
    dispatch_float(state.dtype(), [&]<typename TS>(TypeTag<TS>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            for (int64_t j = 0; j < rank; ++j) {
              const float a = sigmoid(load<TP>(proj, r, j));
              const float cand = std::tanh(load<TP>(proj, r, rank + j));
              const float s = load<TS>(state, r, j);
              store<TS>(state, r, j, a * s + (1.0f - a) * cand);
              store<TO>(out, r, j, std::tanh(load<TP>(proj, r, 2 * rank + j)));
            }
          }
        });
      });
    });
  });
}

}  // namespace dspark::cpu
