#include "dspark/core/tensor.h"

#include <fmt/format.h>

namespace dspark {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims)) {}

Shape::Shape(std::span<const int64_t> dims) {
  DSPARK_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "rank {} exceeds {}", dims.size(),
               kMaxDims);
  for (int64_t d : dims) push_back(d);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  DSPARK_CHECK(rank_ < kMaxDims, "rank exceeds {}", kMaxDims);
  dims_[rank_++] = d;
}

std::string Shape::str() const {
  return fmt::format("[{}]", fmt::join(begin(), end(), ", "));
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[i] != b.dims_[i]) return false;
  return true;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides = shape;
  int64_t s = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor::Tensor(void* data, DType dtype, Shape shape, Device device)
    : Tensor(data, dtype, shape, contiguous_strides(shape), device) {}

Tensor::Tensor(void* data, DType dtype, Shape shape, Shape strides, Device device)
    : data_(data), dtype_(dtype), device_(device), shape_(shape), strides_(strides) {
  DSPARK_CHECK(shape.size() == strides.size(), "shape {} and strides {} differ in rank",
               shape.str(), strides.str());
  for (int64_t d : shape) DSPARK_CHECK(d >= 0, "negative dimension in shape {}", shape.str());
}

int Tensor::normalize_dim(int d) const {
  const int r = dim();
  const int n = d < 0 ? d + r : d;
  DSPARK_CHECK(n >= 0 && n < r, "dim {} out of range for rank {}", d, r);
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(Shape shape) const {
  DSPARK_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {}", describe());
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DSPARK_CHECK(infer < 0, "reshape {}: more than one -1", shape.str());
      infer = i;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    DSPARK_CHECK(known > 0 && numel() % known == 0, "cannot reshape {} to {}", shape_.str(),
                 shape.str());
    shape[infer] = numel() / known;
  }
  DSPARK_CHECK(shape.numel() == numel(), "cannot reshape {} to {}", shape_.str(), shape.str());
  return Tensor(data_, dtype_, shape, device_);
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  const int n = normalize_dim(d);
  DSPARK_CHECK(0 <= begin && begin <= end && end <= shape_[n], "slice [{}, {}) of dim {} size {}",
               begin, end, d, shape_[n]);
  Shape shape = shape_;
  shape[n] = end - begin;
  char* p = static_cast<char*>(data_);
  if (p) p += static_cast<ptrdiff_t>(begin * strides_[n]) * static_cast<ptrdiff_t>(element_size());
  return Tensor(p, dtype_, shape, strides_, device_);
}

Tensor Tensor::select(int d, int64_t index) const {
  const int n = normalize_dim(d);
  DSPARK_CHECK(0 <= index && index < shape_[n], "index {} out of range for dim {} size {}", index,
               d, shape_[n]);
  Shape shape, strides;
  for (int i = 0; i < dim(); ++i) {
    if (i == n) continue;
    shape.push_back(shape_[i]);
    strides.push_back(strides_[i]);
  }
  char* p = static_cast<char*>(data_) +
            static_cast<ptrdiff_t>(index * strides_[n]) * static_cast<ptrdiff_t>(element_size());
  return Tensor(p, dtype_, shape, strides, device_);
}

std::string Tensor::describe() const {
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_.str(), device_.name());
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  DSPARK_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype),
               t.describe());
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  DSPARK_CHECK(t.shape() == shape, "{}: {} must have shape {}, got {}", op, name, shape.str(),
               t.describe());
}

void check_rank(const char* op, const char* name, const Tensor& t, int rank) {
  DSPARK_CHECK(t.dim() == rank, "{}: {} must have rank {}, got {}", op, name, rank, t.describe());
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DSPARK_CHECK(a.device() == b.device(), "{}: tensors on different devices ({} vs {})", op,
               a.device().name(), b.device().name());
}

void check_contiguous(const char* op, const char* name, const Tensor& t) {
  DSPARK_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got strides {}", op, name,
               t.strides().str());
}

}  // namespace dspark
