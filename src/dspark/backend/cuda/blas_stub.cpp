#include "dspark/backend/cuda/blas.h"

#include "dspark/core/error.h"

namespace dspark::cuda {
BlasLt::BlasLt(const Stream&, size_t) { DSPARK_FAIL(unsupported, "dspark was built without CUDA"); }
BlasLt::~BlasLt() = default;
BlasLt::BlasLt(BlasLt&&) noexcept {}
BlasLt& BlasLt::operator=(BlasLt&&) noexcept { return *this; }
}  // namespace dspark::cuda
