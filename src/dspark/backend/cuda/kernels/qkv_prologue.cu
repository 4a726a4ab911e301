// qkv_prologue on CUDA (contract: ops/qkv_prologue.h), one kernel: a CTA per token and group of 8
// heads (q heads, then k, then v), one head per warp. Each warp loads its head, then the CTA's
// threads fill a cos/sin table of the token's position (precise sincosf, as the rope kernel);
// in a head lane l holds elements l + 32c (c < NC = head_dim / 32) of the head,
// so the RoPE pairs (j, j + head_dim / 2) meet in one lane (c and c + NC / 2) and the norm is one
// warp sum. Values are rounded to the activation dtype where the unfused ops store them (after the
// norm, after RoPE), so the results are those of convert + rms_norm + rope + kv_write up to the
// order of the norm's sum of squares.
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/rope_table.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxHalf = 128;  // head_dim <= 256

template <typename T, typename TP>
struct PrologueParams {
  const T* qkv;
  int64_t qkv_stride;
  int n_heads, n_kv_heads;
  const void* q_norm;  // [head_dim] or null
  const void* k_norm;
  device::FloatKind q_norm_kind, k_norm_kind;
  float eps;
  bool unit_offset;
  const int32_t* positions;
  const float* inv_freq;  // [head_dim / 2]
  float attention_scaling;
  const int32_t* slots;
  TP* k_pages;  // [n_pages, page_size, n_kv_heads, head_dim], contiguous
  TP* v_pages;
  T* q_out;  // [n, n_heads * head_dim]
};

template <typename T, typename TP, int NC>
__global__ void __launch_bounds__(kWarps * 32) qkv_prologue_kernel(PrologueParams<T, TP> p) {
  constexpr int kD = NC * 32, kHalf = kD / 2;
  __shared__ float s_cos[kMaxHalf], s_sin[kMaxHalf];
  const int64_t token = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total = p.n_heads + 2 * p.n_kv_heads;
  const int h = blockIdx.y * kWarps + warp;  // this warp's head: q heads, then k, then v
  const bool is_q = h < p.n_heads, is_v = h >= p.n_heads + p.n_kv_heads;
  const void* norm = is_q ? p.q_norm : p.k_norm;
  // Loads issued before the programmatic wait: the norm weights (never written by a
  // forward) and the token's position and slot (metadata uploaded before the forward's first
  // kernel, which every kernel of the chain starts after). Nothing waits on them before the
  // trigger, so a prologue that starts late (after cuBLASLt's projection) still lets the
  // attention launch at once; one that starts early (after the one-row kernel) has them in
  // registers when its wait returns. (A cos/sin table built before the wait delayed the trigger:
  // the verify's attention started ~1 us later.)
  float x[NC], w[NC];
  if (h < total && !is_v && norm) {
    const device::FloatKind kind = is_q ? p.q_norm_kind : p.k_norm_kind;
#pragma unroll
    for (int c = 0; c < NC; ++c) w[c] = device::load_float(norm, lane + 32 * c, kind);
  }
  const int32_t slot = p.slots[token];
  const int32_t position = p.positions[token];
  // A programmatic dependent itself (after the QKV projection, e.g. the small-M kernel). It lets
  // the attention kernel that follows launch before its own wait (the exception in pdl.cuh), so
  // that kernel's chain of metadata, page ids and cached K/V, all written before this forward's
  // projection started, runs while the projection finishes; the attention's own wait returns
  // only once this grid, and so the projection, has completed.
  pdl_launch_dependents();
  pdl_wait();
  const T* row = p.qkv + token * p.qkv_stride;
  // The head's values are loaded before the table is built, so that their latency overlaps it.
  if (h < total) {
#pragma unroll
    for (int c = 0; c < NC; ++c) x[c] = device::to_float(row[h * kD + lane + 32 * c]);
  }
  const float pos = static_cast<float>(position);
  device::fill_rope_table(pos, p.inv_freq, kHalf, p.attention_scaling, s_cos, s_sin);
  __syncthreads();
  if (h >= total) return;
  // Contiguous pages: slot s = page * page_size + offset starts at s * n_kv_heads * head_dim.
  const int64_t slot_base = slot < 0 ? 0 : static_cast<int64_t>(slot) * p.n_kv_heads * kD;
  if (is_v) {  // v: straight into the cache
    if (slot < 0) return;
    TP* dst = p.v_pages + slot_base + (h - p.n_heads - p.n_kv_heads) * kD;
#pragma unroll
    for (int c = 0; c < NC; ++c) dst[lane + 32 * c] = device::from_float<TP>(x[c]);
    return;
  }
  if (norm) {
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) ss += x[c] * x[c];
    ss = device::warp_sum(ss);
    const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(kD) + p.eps);
#pragma unroll
    for (int c = 0; c < NC; ++c)
      x[c] = device::to_float(
          device::from_float<T>(x[c] * inv_rms * (p.unit_offset ? 1.0f + w[c] : w[c])));
  }
  float y[NC];
#pragma unroll
  for (int c = 0; c < NC / 2; ++c) {
    const int j = lane + 32 * c;
    const float x1 = x[c], x2 = x[c + NC / 2];
    y[c] = device::to_float(device::from_float<T>(x1 * s_cos[j] - x2 * s_sin[j]));
    y[c + NC / 2] = device::to_float(device::from_float<T>(x2 * s_cos[j] + x1 * s_sin[j]));
  }
  if (is_q) {
    T* dst = p.q_out + token * static_cast<int64_t>(p.n_heads) * kD + h * kD;
#pragma unroll
    for (int c = 0; c < NC; ++c) dst[lane + 32 * c] = device::from_float<T>(y[c]);
  } else if (slot >= 0) {
    TP* dst = p.k_pages + slot_base + (h - p.n_heads) * kD;
#pragma unroll
    for (int c = 0; c < NC; ++c) dst[lane + 32 * c] = device::from_float<TP>(y[c]);
  }
}

}  // namespace

void qkv_prologue(Context& ctx, const QkvPrologueArgs& a) {
  const int64_t n = a.qkv.size(0);
  dispatch_float(a.qkv.dtype(), [&]<typename T>(TypeTag<T>) {
    dispatch_float(a.k_pages.dtype(), [&]<typename TP>(TypeTag<TP>) {
      PrologueParams<device_t<T>, device_t<TP>> p{};
      p.qkv = device_ptr<T>(a.qkv);
      p.qkv_stride = n > 1 ? a.qkv.stride(0) : a.qkv.size(1);
      p.n_heads = a.n_heads;
      p.n_kv_heads = a.n_kv_heads;
      p.q_norm = a.q_norm.defined() ? a.q_norm.data() : nullptr;
      p.k_norm = a.k_norm.defined() ? a.k_norm.data() : nullptr;
      p.q_norm_kind = a.q_norm.defined() ? float_kind(a.q_norm.dtype()) : device::FloatKind::f32;
      p.k_norm_kind = a.k_norm.defined() ? float_kind(a.k_norm.dtype()) : device::FloatKind::f32;
      p.eps = a.norm.eps;
      p.unit_offset = a.norm.unit_offset;
      p.positions = static_cast<const int32_t*>(a.positions.data());
      p.inv_freq = static_cast<const float*>(a.inv_freq.data());
      p.attention_scaling = a.attention_scaling;
      p.slots = static_cast<const int32_t*>(a.slots.data());
      p.k_pages = device_ptr<TP>(a.k_pages);
      p.v_pages = device_ptr<TP>(a.v_pages);
      p.q_out = a.n_heads > 0 ? device_ptr<T>(a.q_out) : nullptr;  // none: K/V only
      const dim3 grid(static_cast<unsigned>(n),
                      static_cast<unsigned>((a.n_heads + 2 * a.n_kv_heads + kWarps - 1) / kWarps));
      const cudaStream_t stream = stream_of(ctx);
      const ProgrammaticAfterCublasLt programmatic;  // also after the q/k/v GEMM (pdl.cuh)
      switch (a.head_dim) {
        case 64:
          launch_pdl(qkv_prologue_kernel<device_t<T>, device_t<TP>, 2>, grid, dim3(kWarps * 32), 0,
                     stream, p);
          break;
        case 128:
          launch_pdl(qkv_prologue_kernel<device_t<T>, device_t<TP>, 4>, grid, dim3(kWarps * 32), 0,
                     stream, p);
          break;
        default:
          launch_pdl(qkv_prologue_kernel<device_t<T>, device_t<TP>, 8>, grid, dim3(kWarps * 32), 0,
                     stream, p);
          break;
      }
    });
  });
}

}  // namespace dspark::cuda
