#include "dspark/model/layers.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "dspark/core/convert_host.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/load_progress.h"
#include "dspark/model/weight_source.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/linear_fp8.h"
#include "dspark/ops/linear_norm.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace {

constexpr size_t kArenaAlignment = 256;

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace

// ---- WeightLoader ----------------------------------------------------------------------------

WeightLoader::WeightLoader(const SafeTensors& st, Device device, DType dtype)
    : owned_(std::make_shared<SafeTensorsWeights>(st)),
      source_(owned_.get()),
      device_(device),
      dtype_(dtype) {}

bool WeightLoader::contains(const std::string& name) const {
  return source_->contains(name);
}

Tensor WeightLoader::checked(const Part& part) const {
  const Tensor t = source_->get(part.name);
  DSPARK_CHECK_KIND(io, t.shape() == part.expected,
                    "tensor '{}' has shape {}, but the config implies {} ({})", part.name,
                    t.shape().str(), part.expected.str(), source_->origin());
  DSPARK_CHECK_KIND(unsupported, dtype_is_float(t.dtype()),
                    "tensor '{}' has dtype {}; expected a float weight", part.name,
                    dtype_name(t.dtype()));
  if (LoadProgress::active()) LoadProgress::add_to_active(source_->stored_bytes(part.name));
  return t;
}

OwnedTensor WeightLoader::load(const std::string& name, const Shape& expected) const {
  return load_concat({Part{name, expected}}, dtype_);
}

OwnedTensor WeightLoader::load(const std::string& name, const Shape& expected, DType dtype) const {
  return load_concat({Part{name, expected}}, dtype);
}

OwnedTensor WeightLoader::load_concat(const std::vector<Part>& parts, DType dtype) const {
  DSPARK_CHECK(!parts.empty(), "load_concat: no parts");
  std::vector<Tensor> sources;
  sources.reserve(parts.size());
  int64_t rows = 0;
  for (const Part& part : parts) {
    sources.push_back(checked(part));
    const Tensor& t = sources.back();
    DSPARK_CHECK(t.dim() == parts[0].expected.size(), "load_concat: rank mismatch for '{}'",
                 part.name);
    for (int d = 1; d < t.dim(); ++d) {
      DSPARK_CHECK(t.size(d) == parts[0].expected[d], "load_concat: '{}' trailing dims differ",
                   part.name);
    }
    rows += t.dim() == 0 ? 1 : t.size(0);
  }
  Shape shape = parts[0].expected;
  if (shape.size() > 0) shape[0] = rows;

  OwnedTensor host(dtype, shape, Device::cpu());
  char* out = static_cast<char*>(host.view().data());
  for (const Tensor& t : sources) {
    convert_host(t.data(), t.dtype(), out, dtype, t.numel());
    out += static_cast<size_t>(t.numel()) * dtype_size(dtype);
  }
  if (device_.is_cpu()) return host;
  return OwnedTensor::copy_of(host.view(), device_);
}

namespace {

// FP8 views i..j-1 (io/fp8_quant.h) stacked along the rows into one part on `device`: the codes
// as stored, the block scales as f32.
QuantizedWeight::Part concat_fp8(const std::vector<QuantizedView>& views, size_t i, size_t j,
                                 int64_t rows, int64_t row0, Device device) {
  const QuantizedView& first = views[i];
  const int64_t k = first.k, scale_cols = first.scales.size(1);
  int64_t scale_rows = 0;
  for (size_t p = i; p < j; ++p) scale_rows += views[p].scales.size(0);
  OwnedTensor codes(DType::u8, Shape{rows, k}, Device::cpu());
  OwnedTensor scales(DType::f32, Shape{scale_rows, scale_cols}, Device::cpu());
  auto* dst = static_cast<uint8_t*>(codes.view().data());
  auto* sdst = static_cast<float*>(scales.view().data());
  for (size_t p = i; p < j; ++p) {
    const QuantizedView& v = views[p];
    const size_t bytes = static_cast<size_t>(v.blocks.numel());
    std::memcpy(dst, v.blocks.data(), bytes);
    dst += bytes;
    convert_host(v.scales.data(), v.scales.dtype(), sdst, DType::f32, v.scales.numel());
    sdst += v.scales.numel();
  }
  QuantizedWeight::Part part;
  part.blocks = device.is_cpu() ? std::move(codes) : OwnedTensor::copy_of(codes.view(), device);
  part.scales = device.is_cpu() ? std::move(scales) : OwnedTensor::copy_of(scales.view(), device);
  part.w.format = WeightFormat::fp8_blocks;
  part.w.data = part.blocks.view();
  part.w.scales = part.scales.view();
  part.w.n = rows;
  part.w.k = k;
  part.w.block_n = first.block_n;
  part.w.block_k = first.block_k;
  part.row0 = row0;
  return part;
}

}  // namespace

int64_t QuantizedWeight::bytes() const {
  int64_t b = 0;
  for (const Part& p : parts) {
    b += static_cast<int64_t>(p.blocks.view().numel());
    if (p.scales->defined()) b += static_cast<int64_t>(p.scales.view().numel() * sizeof(float));
  }
  return b;
}

QuantizedWeight WeightLoader::load_quantized(const std::vector<Part>& parts) const {
  DSPARK_CHECK(!parts.empty(), "load_quantized: no parts");
  std::vector<QuantizedView> views;
  for (const Part& part : parts) {
    std::optional<QuantizedView> v = source_->get_quantized(part.name);
    if (!v) return {};
    const bool shape_ok =
        part.expected.size() == 2 && part.expected[0] == v->n && part.expected[1] == v->k;
    DSPARK_CHECK_KIND(io, shape_ok,
                      "tensor '{}' has shape [{}, {}], but the config implies {} ({})", part.name,
                      v->n, v->k, part.expected.str(), source_->origin());
    if (v->format == WeightFormat::fp8_blocks && !device_.is_cpu() &&
        !(dtype_ == DType::bf16 && v->k % 16 == 0 &&
          cuda_fp8_blocks_supported(v->block_n, v->block_k)))
      return {};
    views.push_back(*v);
  }
  QuantizedWeight out;
  int64_t row0 = 0;
  for (size_t i = 0; i < views.size();) {
    // A run of parts of one format: one matrix.
    const QuantizedView& first = views[i];
    const bool fp8 = first.format == WeightFormat::fp8_blocks;
    auto joins = [&](size_t p) {
      const QuantizedView& v = views[p];
      if (v.format != first.format) return false;
      if (!fp8) return v.quant == first.quant;
      return v.block_n == first.block_n && v.block_k == first.block_k &&
             views[p - 1].n % first.block_n == 0;
    };
    size_t j = i + 1;
    int64_t rows = first.n;
    while (j < views.size() && joins(j)) rows += views[j++].n;
    if (fp8) {
      out.parts.push_back(concat_fp8(views, i, j, rows, row0, device_));
      row0 += rows;
      i = j;
      continue;
    }
    const int64_t k = views[i].k;
    int64_t row_bytes = views[i].blocks.size(1);
    // The run's rows as stored: the source's own bytes for a run of one part, else the parts
    // copied one after the other into scratch memory that the whole load reuses. Each weight's
    // bytes then land in fresh memory once (its final buffer), not twice: a load's time was
    // mostly the kernel faulting in and freeing pages, and more so with a second thread alive.
    Tensor stored = views[i].blocks;
    if (j > i + 1) {
      const size_t total = static_cast<size_t>(rows * row_bytes);
      if (scratch_bytes_ < total) {
        scratch_.reset(new uint8_t[total]);
        scratch_bytes_ = total;
      }
      uint8_t* dst = scratch_.get();
      for (size_t p = i; p < j; ++p) {
        const size_t bytes = static_cast<size_t>(views[p].blocks.numel());
        std::memcpy(dst, views[p].blocks.data(), bytes);
        dst += bytes;
      }
      stored = Tensor(scratch_.get(), DType::u8, Shape{rows, row_bytes}, Device::cpu());
    }
    OwnedTensor host;  // set where the run changes on the way (the CPU keeps it)
    // The block type the device's kernels take (CUDA: MLX's groups of 64 / 128 as 32-value
    // blocks, the same values).
    QuantType quant = views[i].quant;
    if (const QuantType want = preferred_block_type(device_, quant); want != quant) {
      row_bytes = quant_row_bytes(want, k);
      host = OwnedTensor(DType::u8, Shape{rows, row_bytes}, Device::cpu());
      expand_quant_groups(quant, static_cast<const uint8_t*>(stored.data()),
                          rows * (k / quant_block(quant).elements),
                          static_cast<uint8_t*>(host.view().data()));
      stored = host.view();
      quant = want;
    }
    // The rows as the device reads them best (the CPU: groups of 8 rows interleaved).
    const WeightFormat format = preferred_block_format(device_, quant);
    if (format != WeightFormat::blocks) {
      OwnedTensor relaid(DType::u8, Shape{rows, row_bytes}, Device::cpu());
      relayout_blocks(quant, rows, k, static_cast<const uint8_t*>(stored.data()), format,
                      static_cast<uint8_t*>(relaid.view().data()));
      host = std::move(relaid);
      stored = host.view();
    }
    QuantizedWeight::Part part;
    if (!device_.is_cpu() || !host->defined()) host = OwnedTensor::copy_of(stored, device_);
    part.blocks = std::move(host);
    part.w.format = format;
    part.w.quant = quant;
    part.w.data = part.blocks.view();
    part.w.n = rows;
    part.w.k = k;
    part.row0 = row0;
    row0 += rows;
    out.parts.push_back(std::move(part));
    i = j;
  }
  if (LoadProgress::active())
    for (const Part& part : parts) LoadProgress::add_to_active(source_->stored_bytes(part.name));
  return out;
}

void WeightLoader::load_matrix(const std::vector<Part>& parts, OwnedTensor& dense,
                               QuantizedWeight& blocks) const {
  blocks = load_quantized(parts);
  if (!blocks.defined()) dense = load_concat(parts);
}

TableWeight TableWeight::load(const WeightLoader& w, const std::string& name,
                              const Shape& expected) {
  TableWeight t;
  t.quantized = w.load_quantized({{name, expected}});
  // Tables of FP8 blocks (rare: checkpoints keep embeddings and heads in floats) load dense, since
  // gather_rows takes GGUF blocks only.
  if (t.quantized.defined() && t.quantized.parts[0].w.format == WeightFormat::fp8_blocks)
    t.quantized = {};
  if (!t.quantized.defined()) t.dense = w.load(name, expected);
  return t;
}

// ---- PackedIndices ---------------------------------------------------------------------------

void PackedIndices::clear() {
  host_.clear();
  offsets_.assign(1, 0);
}

int PackedIndices::add(const std::vector<int32_t>& values) {
  if (offsets_.empty()) offsets_.push_back(0);
  host_.insert(host_.end(), values.begin(), values.end());
  offsets_.push_back(static_cast<int64_t>(host_.size()));
  return static_cast<int>(offsets_.size()) - 2;
}

void PackedIndices::upload(Context& ctx) {
  const size_t bytes = host_.size() * sizeof(int32_t);
  if (device_.bytes() < bytes || device_.device() != ctx.device()) {
    ctx.synchronize();  // the old buffer may still be read by enqueued kernels
    device_ = Buffer(ctx.device(), std::max<size_t>(bytes + bytes / 2, 4096));
  }
  // Pageable host memory: the copy is staged before copy_async returns, so host_ may be reused.
  ctx.copy_async(device_.data(), host_.data(), bytes);
}

Tensor PackedIndices::view(int slot) const {
  DSPARK_CHECK(slot >= 0 && static_cast<size_t>(slot) + 1 < offsets_.size(), "bad slot {}", slot);
  const int64_t begin = offsets_[static_cast<size_t>(slot)];
  const int64_t n = offsets_[static_cast<size_t>(slot) + 1] - begin;
  return Tensor(static_cast<int32_t*>(device_.data()) + begin, DType::i32, Shape{n},
                device_.device());
}

// ---- DeviceIndices ---------------------------------------------------------------------------

DeviceIndices::DeviceIndices(Device device, std::vector<int64_t> capacities)
    : device_(device), capacities_(std::move(capacities)) {
  DSPARK_CHECK(device_.is_cuda(), "DeviceIndices needs a CUDA device");
  allocate();
}

void DeviceIndices::allocate() {
  constexpr int64_t kSlotAlignment = 64;  // i32 values: 256 bytes
  offsets_.assign(capacities_.size() + 1, 0);
  for (size_t i = 0; i < capacities_.size(); ++i) {
    DSPARK_CHECK(capacities_[i] >= 0, "DeviceIndices: negative capacity");
    offsets_[i + 1] =
        offsets_[i] + (capacities_[i] + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  }
  sizes_.assign(capacities_.size(), 0);
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(offsets_.back(), 1)) * sizeof(int32_t);
  fence_.wait();  // the old staging buffer may still be read by a queued copy
  device_buffer_ = Buffer(device_, bytes);
  host_ = PinnedBuffer(bytes);
}

void DeviceIndices::grow(int slot, int64_t capacity) {
  int64_t& c = capacities_.at(static_cast<size_t>(slot));
  if (capacity <= c) return;
  c = capacity;
  allocate();
}

void DeviceIndices::stage(Context& ctx, std::initializer_list<const std::vector<int32_t>*> arrays) {
  DSPARK_CHECK(arrays.size() == capacities_.size(), "DeviceIndices::stage: {} arrays for {} slots",
               arrays.size(), capacities_.size());
  fence_.wait();
  auto* host = static_cast<int32_t*>(host_.data());
  size_t i = 0;
  int64_t end = 0;
  for (const std::vector<int32_t>* a : arrays) {
    const auto n = static_cast<int64_t>(a->size());
    DSPARK_CHECK(n <= capacities_[i], "DeviceIndices::stage: slot {} holds {} values, not {}", i,
                 capacities_[i], n);
    if (n > 0) std::memcpy(host + offsets_[i], a->data(), static_cast<size_t>(n) * sizeof(int32_t));
    sizes_[i] = n;
    if (n > 0) end = offsets_[i] + n;
    ++i;
  }
  ctx.copy_async(device_buffer_.data(), host, static_cast<size_t>(end) * sizeof(int32_t));
  fence_.record(ctx);
}

Tensor DeviceIndices::view(int slot) const {
  const auto s = static_cast<size_t>(slot);
  DSPARK_CHECK(s < sizes_.size(), "DeviceIndices: bad slot {}", slot);
  return Tensor(static_cast<int32_t*>(device_buffer_.data()) + offsets_[s], DType::i32,
                Shape{sizes_[s]}, device_);
}

// ---- ActivationArena -------------------------------------------------------------------------

size_t ActivationArena::bytes_for(DType dtype, const Shape& shape) {
  return align_up(static_cast<size_t>(shape.numel()) * dtype_size(dtype), kArenaAlignment);
}

void ActivationArena::begin(Device device, size_t bytes) {
  if (buffer_.bytes() < bytes || buffer_.device() != device) {
    buffer_ = Buffer(device, bytes);
    ++n_reallocations_;
  }
  used_ = 0;
}

Tensor ActivationArena::take(DType dtype, const Shape& shape) {
  const size_t bytes = bytes_for(dtype, shape);
  DSPARK_CHECK(used_ + bytes <= buffer_.bytes(), "activation arena overflow: {} + {} > {}", used_,
               bytes, buffer_.bytes());
  void* p = static_cast<char*>(buffer_.data()) + used_;
  used_ += bytes;
  return Tensor(p, dtype, shape, buffer_.device());
}

// ---- blocks ----------------------------------------------------------------------------------

namespace {

// y = x . w^T (+ bias) for a weight in any of the forms a block holds: block-quantized parts
// (one linear per part, into its columns of y; two parts as one linear_pair), else dense or FP8
// (project, ops/linear_fp8.h).
void project_any(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
                 const QuantizedWeight& q, const Tensor& bias, const Tensor& y) {
  if (!q.defined()) return project(ctx, x, w, scale, bias, y);
  const bool has_bias = bias.defined() && bias.numel() > 0;
  if (q.parts.size() == 2) {  // e.g. Q4_K q/k rows and Q6_K v rows: one launch where it can
    const QuantizedWeight::Part &a = q.parts[0], &b = q.parts[1];
    const auto bias_of = [&](const QuantizedWeight::Part& p) {
      return has_bias ? bias.slice(0, p.row0, p.row0 + p.w.n) : Tensor{};
    };
    return linear_pair(ctx, x, a.w, bias_of(a), y.slice(1, a.row0, a.row0 + a.w.n), b.w, bias_of(b),
                       y.slice(1, b.row0, b.row0 + b.w.n));
  }
  for (const QuantizedWeight::Part& p : q.parts) {
    const int64_t end = p.row0 + p.w.n;
    const Tensor part_y = q.parts.size() == 1 ? y : y.slice(1, p.row0, end);
    linear(ctx, x, p.w, has_bias ? bias.slice(0, p.row0, end) : Tensor{}, part_y);
  }
}

}  // namespace

void project_then(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
                  const QuantizedWeight& q, const Tensor& bias, const Tensor& y,
                  const ResidualNorm* then) {
  if (then != nullptr && !q.defined() && !scale.defined() &&
      !(bias.defined() && bias.numel() > 0)) {
    // y is the block's out, scratch here: the fused kernel need not store it.
    linear_add_rms_norm(ctx, x, w, y, then->residual, then->weight, then->out, then->params,
                        LinearNormExtras{then->tap, false});
    return;
  }
  project_any(ctx, x, w, scale, q, bias, y);
  if (then == nullptr) return;
  add_rms_norm(ctx, then->residual, y, then->weight, then->out, then->params);
  if (then->tap.defined()) convert(ctx, then->residual, then->tap);
}

void load_mlp_weights(const WeightLoader& w, const std::string& prefix, int64_t hidden,
                      int64_t inter, MlpWeights& out) {
  w.load_matrix({{prefix + "gate_proj.weight", Shape{inter, hidden}},
                 {prefix + "up_proj.weight", Shape{inter, hidden}}},
                out.gate_up, out.gate_up_q);
  w.load_matrix({{prefix + "down_proj.weight", Shape{hidden, inter}}}, out.down, out.down_q);
}

void project_rows(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
                  const QuantizedWeight& q, int64_t begin, int64_t end, const Tensor& bias,
                  const Tensor& y) {
  const bool has_bias = bias.defined() && bias.numel() > 0;
  if (!q.defined()) {
    project(ctx, x, w.rows(begin, end), scale.defined() ? scale.slice(0, begin, end) : Tensor{},
            has_bias ? bias : Tensor{}, y);
    return;
  }
  DSPARK_CHECK(0 <= begin && begin < end && end <= q.rows(), "project_rows: rows [{}, {}) of {}",
               begin, end, q.rows());
  for (const QuantizedWeight::Part& p : q.parts) {
    const int64_t lo = std::max(begin, p.row0), hi = std::min(end, p.row0 + p.w.n);
    if (lo >= hi) continue;
    linear(ctx, x, weight_rows(p.w, lo - p.row0, hi - p.row0),
           has_bias ? bias.slice(0, lo - begin, hi - begin) : Tensor{},
           y.slice(1, lo - begin, hi - begin));
  }
}

void attention_block(Context& ctx, const AttentionWeights& w, const AttentionDims& dims,
                     const RopeOnDevice& rope_table, const ForwardMeta& meta, const Tensor& k_pages,
                     const Tensor& v_pages, const AttentionParams& params, const Tensor& xn,
                     const AttentionScratch& scratch, const Tensor& out, const ResidualNorm* then) {
  const int64_t n = xn.size(0);
  const int hd = dims.head_dim;
  project_any(ctx, xn, w.qkv, w.qkv_scale.view(), w.qkv_q, w.qkv_bias.view(), scratch.qkv);

  // Per-head norms (when the weights have them), RoPE, and the K/V write: one kernel on CUDA.
  QkvPrologueArgs pro;
  pro.qkv = scratch.qkv;
  pro.n_heads = dims.n_heads;
  pro.n_kv_heads = dims.n_kv_heads;
  pro.head_dim = hd;
  if (w.q_norm->defined()) pro.q_norm = w.q_norm.view();
  if (w.k_norm->defined()) pro.k_norm = w.k_norm.view();
  pro.norm = RmsNormParams{dims.rms_norm_eps, false};
  pro.positions = meta.positions;
  pro.inv_freq = rope_table.inv_freq;
  pro.attention_scaling = rope_table.attention_scaling;
  pro.slots = meta.slots;
  pro.k_pages = k_pages;
  pro.v_pages = v_pages;
  pro.q_out = scratch.q_tmp;
  pro.k_tmp = scratch.k_tmp;
  const Tensor q = qkv_prologue(ctx, pro);

  const PagedKv kv{k_pages, v_pages, meta.page_indptr, meta.page_indices, meta.kv_lens};
  const Tensor attn = scratch.attn.reshape(Shape{n, dims.n_heads, hd});
  paged_attention(ctx, q, kv, meta.q_indptr, meta.positions, params, attn);
  project_then(ctx, scratch.attn, w.o, w.o_scale.view(), w.o_q, w.o_bias.view(), out, then);
}

void mlp_block(Context& ctx, const MlpWeights& w, const Tensor& xn, const Tensor& gate_up,
               const Tensor& act, const Tensor& out, const ResidualNorm* then) {
  const int64_t inter = act.size(1);
  if (w.gate_up_q.parts.size() == 1) {  // gate and up rows of one format: one product
    linear_swiglu(ctx, xn, w.gate_up_q.parts[0].w, gate_up, act);
  } else {
    project_any(ctx, xn, w.gate_up, w.gate_up_scale.view(), w.gate_up_q, Tensor{}, gate_up);
    swiglu(ctx, gate_up.slice(1, 0, inter), gate_up.slice(1, inter, 2 * inter), act);
  }
  project_then(ctx, act, w.down, w.down_scale.view(), w.down_q, Tensor{}, out, then);
}

}  // namespace dspark
