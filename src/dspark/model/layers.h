// Building blocks shared by the decoder families: weight loading (shape checks against the config,
// conversion to the engine dtype on the target device, fused projections), the per-forward packed
// metadata, the grow-only activation arena, and the attention / SwiGLU MLP blocks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/backend/pinned_memory.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/attention.h"
#include "dspark/ops/norm.h"

namespace dspark {

class SafeTensors;
class WeightSource;

// ---- weights ----------------------------------------------------------------------------------

// A weight kept in the block-quantized format it is stored in (a GGUF file's Q4_K, Q8_0, ...):
// one or more matrices stacked along the rows, each one run of source tensors of the same format
// (a Q4_K_M file keeps v_proj in Q6_K beside q/k in Q4_K: two parts). Empty: not quantized.
struct QuantizedWeight {
  struct Part {
    OwnedTensor blocks;  // u8 [n, row bytes] (FP8: [n, k] codes) on the model's device
    OwnedTensor scales;  // FP8 blocks only: f32 [row blocks, column blocks] on the model's device
    WeightMatrix w;      // the view linear() takes
    int64_t row0 = 0;    // the part's first row in the stacked weight
  };
  std::vector<Part> parts;
  bool defined() const { return !parts.empty(); }
  int64_t rows() const { return parts.empty() ? 0 : parts.back().row0 + parts.back().w.n; }
  int64_t bytes() const;
};

class WeightLoader;

// An embedding table or LM head as loaded: block-quantized as stored (gather_rows and linear take
// the blocks), else dense in the engine dtype.
struct TableWeight {
  OwnedTensor dense;
  QuantizedWeight quantized;  // at most one part
  bool defined() const { return dense->defined() || quantized.defined(); }
  WeightMatrix matrix() const {
    return quantized.defined() ? quantized.parts[0].w : WeightMatrix::dense(dense.view());
  }
  static TableWeight load(const WeightLoader& w, const std::string& name, const Shape& expected);
};

// Loads checkpoint tensors onto `device`, converting float weights to the requested dtype and
// checking each shape: a mismatch throws ErrorKind::io naming the tensor, the expected and the
// stored shape.
class WeightLoader {
 public:
  WeightLoader(const SafeTensors& st, Device device, DType dtype);
  // Any weight source (model/weight_source.h), e.g. a GGUF file; it must outlive the loader.
  WeightLoader(const WeightSource& source, Device device, DType dtype)
      : source_(&source), device_(device), dtype_(dtype) {}

  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  bool contains(const std::string& name) const;

  // `name` with shape `expected`, in the engine dtype (or `dtype`).
  OwnedTensor load(const std::string& name, const Shape& expected) const;
  OwnedTensor load(const std::string& name, const Shape& expected, DType dtype) const;
  // Several tensors of the same trailing dims concatenated along dim 0 into one weight, e.g. q/k/v
  // projections into one [q_out + k_out + v_out, in] matrix (one GEMM instead of three).
  struct Part {
    std::string name;
    Shape expected;
  };
  OwnedTensor load_concat(const std::vector<Part>& parts, DType dtype) const;
  OwnedTensor load_concat(const std::vector<Part>& parts) const {
    return load_concat(parts, dtype_);
  }
  // The parts as stored when every one is block-quantized with a shape matching `expected` (the
  // weight then stays quantized in memory: linear() multiplies with the blocks), else an empty
  // QuantizedWeight (load them with load / load_concat: dequantized). FP8 blocks stay as stored on
  // the CPU, and on CUDA in bf16 models where its kernels take their blocks
  // (cuda_fp8_blocks_supported, k a multiple of 16). Consecutive parts of one format become one
  // matrix (FP8: while every part but the last fills whole row blocks). Blocks are held in the
  // type the device's kernels take (preferred_block_type: CUDA expands MLX's groups of 64 / 128
  // to 32-value blocks).
  QuantizedWeight load_quantized(const std::vector<Part>& parts) const;
  // A block's projection (q/k/v, o, gate/up, down): into `blocks` when load_quantized keeps the
  // parts as stored, else dense (load_concat) into `dense`.
  void load_matrix(const std::vector<Part>& parts, OwnedTensor& dense,
                   QuantizedWeight& blocks) const;

 private:
  Tensor checked(const Part& part) const;

  std::shared_ptr<const WeightSource> owned_;  // the SafeTensors adapter
  const WeightSource* source_;
  Device device_;
  DType dtype_;
  // load_quantized's staging of a fused run's parts, grown as needed and reused by every load.
  mutable std::unique_ptr<uint8_t[]> scratch_;
  mutable size_t scratch_bytes_ = 0;
};

// ---- per-forward metadata ---------------------------------------------------------------------

// Several i32 arrays packed into one host buffer and uploaded to the device with one copy.
// Usage: clear(); add() each array (returns its slot); upload(ctx); view(slot).
class PackedIndices {
 public:
  void clear();
  int add(const std::vector<int32_t>& values);
  // Enqueues the one host->device copy (the device buffer grows when needed, never shrinks).
  void upload(Context& ctx);
  // The uploaded array `slot` as an i32 [n] tensor on the device.
  Tensor view(int slot) const;

 private:
  std::vector<int32_t> host_;
  std::vector<int64_t> offsets_;  // [n_slots + 1]
  Buffer device_;
};

// Several i32 arrays at fixed device addresses (one slot each, with a capacity), written through
// pinned host memory and uploaded with one asynchronous copy: the per-step metadata a CUDA graph
// reads (a graph bakes the addresses in, so they only move when grow() is called).
// CUDA only (pinned memory).
class DeviceIndices {
 public:
  DeviceIndices() = default;
  DeviceIndices(Device device, std::vector<int64_t> capacities);
  int64_t capacity(int slot) const { return capacities_.at(static_cast<size_t>(slot)); }
  // Reallocates so that `slot` holds at least `capacity` values; every address changes and the
  // contents are lost. The caller synchronises first (queued work may read the old buffers).
  void grow(int slot, int64_t capacity);
  // Writes arrays[i] into slot i of the pinned staging buffer (after the previous copy from it has
  // run) and enqueues one host->device copy on ctx's stream. Each array must fit its slot.
  void stage(Context& ctx, std::initializer_list<const std::vector<int32_t>*> arrays);
  // Slot `slot` as i32 [the size staged last].
  Tensor view(int slot) const;

 private:
  void allocate();

  Device device_;
  std::vector<int64_t> capacities_, offsets_, sizes_;
  Buffer device_buffer_;
  PinnedBuffer host_;
  CopyFence fence_;
};

// ---- activation arena -------------------------------------------------------------------------

// One grow-only device buffer carved into the activation tensors of a forward. begin(bytes)
// makes sure `bytes` are available (reallocating only when a larger batch comes), then take()
// hands out consecutive aligned tensors.
class ActivationArena {
 public:
  // Bytes that take() needs for a tensor of this dtype/shape (including alignment padding).
  static size_t bytes_for(DType dtype, const Shape& shape);
  void begin(Device device, size_t bytes);
  Tensor take(DType dtype, const Shape& shape);
  size_t capacity() const { return buffer_.bytes(); }
  int64_t n_reallocations() const { return n_reallocations_; }

 private:
  Buffer buffer_;
  size_t used_ = 0;
  int64_t n_reallocations_ = 0;
};

// ---- blocks -----------------------------------------------------------------------------------

struct AttentionDims {
  int hidden = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;  // for the per-head q/k norms
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }
};

// A projection whose `*_scale` is defined holds E4M3 codes with per-row scales instead of the
// engine dtype (ops/linear_fp8.h: a drafter's weights, CUDA); empty scales: plain weights.
struct AttentionWeights {
  OwnedTensor qkv;                 // [qkv_width, hidden] engine dtype (q, k, v rows fused)
  OwnedTensor qkv_bias;            // [qkv_width] f32, or empty
  OwnedTensor q_norm;              // [head_dim] f32, or empty (per-head RMSNorm before RoPE, Qwen3)
  OwnedTensor k_norm;              // [head_dim] f32, or empty
  OwnedTensor o;                   // [hidden, q_width]
  OwnedTensor o_bias;              // [hidden] f32, or empty
  OwnedTensor qkv_scale, o_scale;  // [qkv_width] / [hidden] f32, or empty
  // Block-quantized weights instead of qkv / o (a GGUF target's), when defined.
  QuantizedWeight qkv_q, o_q;
};

struct MlpWeights {
  OwnedTensor gate_up;                    // [2 * intermediate, hidden] (gate rows then up rows)
  OwnedTensor down;                       // [hidden, intermediate]
  OwnedTensor gate_up_scale, down_scale;  // f32 per row, or empty (see AttentionWeights)
  QuantizedWeight gate_up_q, down_q;      // block-quantized instead, when defined
};

// Loads `prefix` + "{gate,up,down}_proj.weight" of a SwiGLU MLP of width `inter` (load_matrix: as
// stored when block-quantized on the CPU, else dense).
void load_mlp_weights(const WeightLoader& w, const std::string& prefix, int64_t hidden,
                      int64_t inter, MlpWeights& out);

// y = x . w[begin, end)^T (+ bias [end - begin], optional) for a weight in any of the forms a
// block holds: block-quantized parts `q` when defined, else `w` dense or as E4M3 codes with
// per-row `scale` (ops/linear_fp8.h). E.g. the k/v rows of a fused q/k/v weight, or a whole weight
// (begin 0, end its rows).
void project_rows(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
                  const QuantizedWeight& q, int64_t begin, int64_t end, const Tensor& bias,
                  const Tensor& y);

// The device views of one forward's metadata that every layer reads.
struct ForwardMeta {
  Tensor positions;  // i32 [n]
  Tensor slots;      // i32 [n]
  Tensor q_indptr;   // i32 [n_rows + 1]
  Tensor page_indptr;
  Tensor page_indices;
  Tensor kv_lens;
};

struct RopeOnDevice {
  OwnedTensor inv_freq;  // f32 [rotary_dim / 2]
  float attention_scaling = 1.0f;
};

// Scratch for attention_block (from the arena).
struct AttentionScratch {
  Tensor qkv;    // [n, qkv_width] activation dtype
  Tensor q_tmp;  // [n, q_width]: q after norm + RoPE (qkv_prologue's q_out)
  Tensor k_tmp;  // [n, kv_width]: qkv_prologue's k scratch
  Tensor attn;   // [n, q_width]
};

// The residual add and RMSNorm after a block: residual += the block's out; out = rms_norm(residual)
// (add_rms_norm's arguments). A block given one runs it fused with its last projection where it
// can (ops/linear_norm.h: dense 16-bit weights without scale or bias), else right after it; the
// block's own out is then scratch (its contents afterwards unspecified).
struct ResidualNorm {
  Tensor residual;  // [n, hidden], updated in place
  Tensor weight;    // [hidden]
  Tensor out;       // [n, hidden]
  RmsNormParams params;
  Tensor tap;  // optional [n, hidden]: the updated residual, converted to its dtype
};

// A block's last projection y = x . w^T (+ bias) in any of the forms project_rows takes, then
// `then` when given (fused with the projection where ops/linear_norm.h can: dense 16-bit weights
// without scale or bias; y is then scratch).
void project_then(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
                  const QuantizedWeight& q, const Tensor& bias, const Tensor& y,
                  const ResidualNorm* then);

// out[n, hidden] = o_proj(attention(rope(q), paged cache after writing rope(k), v)) for the
// normalised input xn [n, hidden]; then `then` (optional).
void attention_block(Context& ctx, const AttentionWeights& w, const AttentionDims& dims,
                     const RopeOnDevice& rope, const ForwardMeta& meta, const Tensor& k_pages,
                     const Tensor& v_pages, const AttentionParams& params, const Tensor& xn,
                     const AttentionScratch& scratch, const Tensor& out,
                     const ResidualNorm* then = nullptr);

// out[n, hidden] = down(silu(gate(xn)) * up(xn)); gate_up [n, 2I] and act [n, I] are scratch; then
// `then` (optional).
void mlp_block(Context& ctx, const MlpWeights& w, const Tensor& xn, const Tensor& gate_up,
               const Tensor& act, const Tensor& out, const ResidualNorm* then = nullptr);

}  // namespace dspark
