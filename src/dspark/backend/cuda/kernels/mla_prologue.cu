// mla_prologue on CUDA (contract: ops/mla_prologue.h), one kernel: a CTA per token. Its threads
// sum the squares of the token's c_kv (a block sum) while the cos/sin table of its position is
// built (precise sincosf, as the rope kernel), then write the normalised latent and the rotated
// k_rope into the token's cache slot and the rotated features of every query head into q_out, one
// RoPE pair per thread. Values are rounded to the activation dtype where the unfused ops store
// them (after the norm, after RoPE), so the results are those of rms_norm + convert + rope +
// kv_write + convert + rope up to the order of the norm's sum of squares.
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/rope_table.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHalf = 128;  // rope <= 256

template <typename T, typename TP>
struct MlaPrologueParams {
  const T* kv;  // [n][kv_stride]: c_kv (r), then k_rope (2 * half)
  int64_t kv_stride;
  const void* norm;  // [r]
  device::FloatKind norm_kind;
  float eps;
  int r, half;
  const T* q_rope;  // [n][heads][2 * half], token and head strides
  int64_t q_token_stride, q_head_stride;
  int heads;
  const int32_t* positions;
  const float* inv_freq;  // [half]
  float attention_scaling;
  const int32_t* slots;
  TP* pages;  // [n_pages * page_size][r + 2 * half], contiguous
  T* q_out;   // [n][heads][2 * half], token and head strides
  int64_t o_token_stride, o_head_stride;
};

template <typename T, typename TP>
__global__ void __launch_bounds__(kThreads) mla_prologue_kernel(const MlaPrologueParams<T, TP> p) {
  __shared__ float s_cos[kMaxHalf], s_sin[kMaxHalf], s_red[32];
  const int64_t token = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  // Metadata uploaded before the forward's first kernel: read before the programmatic wait.
  const int32_t slot = p.slots[token];
  const int32_t position = p.positions[token];
  pdl_wait();
  pdl_launch_dependents();
  const T* kv = p.kv + token * p.kv_stride;
  const float pos = static_cast<float>(position);
  device::fill_rope_table(pos, p.inv_freq, p.half, p.attention_scaling, s_cos, s_sin);
  float ss = 0.0f;
  for (int c = tid; c < p.r; c += kThreads) {
    const float v = device::to_float(kv[c]);
    ss += v * v;
  }
  ss = device::block_sum(ss, s_red);  // its barriers also publish the cos/sin table
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.r) + p.eps);
  const int latent = p.r + 2 * p.half;
  TP* row = slot >= 0 ? p.pages + static_cast<int64_t>(slot) * latent : nullptr;
  if (row != nullptr) {
    for (int c = tid; c < p.r; c += kThreads) {
      const float v =
          device::to_float(kv[c]) * inv_rms * device::load_float(p.norm, c, p.norm_kind);
      row[c] = device::from_float<TP>(device::to_float(device::from_float<T>(v)));
    }
  }
  // RoPE pairs (j, j + half): "head" -1 is k_rope, then the query heads.
  const int pairs = (p.heads + 1) * p.half;
  for (int i = tid; i < pairs; i += kThreads) {
    const int h = i / p.half - 1, j = i - (h + 1) * p.half;
    const T* src = h < 0 ? kv + p.r : p.q_rope + token * p.q_token_stride + h * p.q_head_stride;
    const float x1 = device::to_float(src[j]), x2 = device::to_float(src[j + p.half]);
    const T y1 = device::from_float<T>(x1 * s_cos[j] - x2 * s_sin[j]);
    const T y2 = device::from_float<T>(x2 * s_cos[j] + x1 * s_sin[j]);
    if (h >= 0) {
      T* dst = p.q_out + token * p.o_token_stride + h * p.o_head_stride;
      dst[j] = y1;
      dst[j + p.half] = y2;
    } else if (row != nullptr) {
      row[p.r + j] = device::from_float<TP>(device::to_float(y1));
      row[p.r + j + p.half] = device::from_float<TP>(device::to_float(y2));
    }
  }
}

}  // namespace

void mla_prologue(Context& ctx, const MlaPrologueArgs& a) {
  const int64_t n = a.kv.size(0);
  dispatch_float(a.kv.dtype(), [&]<typename T>(TypeTag<T>) {
    dispatch_float(a.pages.dtype(), [&]<typename TP>(TypeTag<TP>) {
      MlaPrologueParams<device_t<T>, device_t<TP>> p{};
      p.kv = device_ptr<T>(a.kv);
      p.kv_stride = a.kv.stride(0);
      p.norm = a.kv_norm.data();
      p.norm_kind = float_kind(a.kv_norm.dtype());
      p.eps = a.eps;
      p.r = static_cast<int>(a.kv_norm.size(0));
      p.half = static_cast<int>(a.inv_freq.numel());
      p.q_rope = device_ptr<T>(a.q_rope);
      p.q_token_stride = a.q_rope.stride(0);
      p.q_head_stride = a.q_rope.stride(1);
      p.heads = static_cast<int>(a.q_rope.size(1));
      p.positions = static_cast<const int32_t*>(a.positions.data());
      p.inv_freq = static_cast<const float*>(a.inv_freq.data());
      p.attention_scaling = a.attention_scaling;
      p.slots = static_cast<const int32_t*>(a.slots.data());
      p.pages = device_ptr<TP>(a.pages);
      p.q_out = device_ptr<T>(a.q_out);
      p.o_token_stride = a.q_out.stride(0);
      p.o_head_stride = a.q_out.stride(1);
      const ProgrammaticAfterCublasLt programmatic;  // also after the query GEMM (pdl.cuh)
      launch_pdl(mla_prologue_kernel<device_t<T>, device_t<TP>>, dim3(static_cast<unsigned>(n)),
                 dim3(kThreads), 0, stream_of(ctx), p);
    });
  });
}

}  // namespace dspark::cuda
