// Tensor: a non-owning view (data pointer, dtype, shape, strides in elements, device).
// OwnedTensor (buffer.h) pairs a view with the Buffer that owns its memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"

namespace dspark {

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int size() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  int64_t numel() const;
  void push_back(int64_t d);
  std::string str() const;  // "[2, 3]"
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

Shape contiguous_strides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // A contiguous (row-major) view.
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::cpu());
  Tensor(void* data, DType dtype, Shape shape, Shape strides, Device device);

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    DSPARK_CHECK(dtype_ == dtype_of<T>(), "tensor is {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return shape_.size(); }
  int64_t size(int d) const { return shape_[normalize_dim(d)]; }
  int64_t stride(int d) const { return strides_[normalize_dim(d)]; }
  int64_t numel() const { return shape_.numel(); }
  size_t element_size() const { return dtype_size(dtype_); }
  // Bytes covered by a contiguous view (numel * element size).
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool defined() const { return data_ != nullptr || (shape_.size() > 0 && numel() == 0); }
  bool is_contiguous() const;
  // True when rows (the last dim) are contiguous: stride(-1) == 1.
  bool rows_contiguous() const { return dim() == 0 || stride(-1) == 1 || size(-1) == 1; }

  // A view of the same elements with another shape (contiguous tensors only; one dim may be -1).
  Tensor reshape(Shape shape) const;
  // Elements [begin, end) along `dim`.
  Tensor slice(int dim, int64_t begin, int64_t end) const;
  // Index `index` along `dim`, dropping that dim.
  Tensor select(int dim, int64_t index) const;
  // Rows [begin, end) along dim 0.
  Tensor rows(int64_t begin, int64_t end) const { return slice(0, begin, end); }

  std::string describe() const;  // "bf16[4, 8] cuda:0"

 private:
  int normalize_dim(int d) const;

  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_{};
  Shape shape_{};
  Shape strides_{};
};

// Shape/dtype/device assertions used by every op (throw with the op name in the message).
void check_dtype(const char* op, const char* name, const Tensor& t, DType dtype);
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape);
void check_rank(const char* op, const char* name, const Tensor& t, int rank);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_contiguous(const char* op, const char* name, const Tensor& t);

}  // namespace dspark
