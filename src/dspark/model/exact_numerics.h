// What of a model `--exact` (cuda::Tuning::batch_invariant) does not yet make batch-invariant on
// CUDA: the parts whose kernels still choose by the number of rows. 16-bit and block-scaled FP8
// weights, norms, attention (MLA too) and dense MoE experts are covered
// (tests/cuda/batch_invariance_cuda_test.cpp); block-quantized (GGUF, MLX) weights are not: their
// kernels change with the row count (dp4a over int8 x up to 4 rows, tensor cores with a plan
// chosen by the rows up to 48, dequantize and cuBLASLt above).
#pragma once

#include <string>
#include <vector>

#include "dspark/model/model.h"

namespace dspark {

// Short descriptions ("Q4_K weights"); empty when the whole forward is covered. Quantized weights
// are recognised by the LM head's format.
std::vector<std::string> batch_invariance_gaps(const Model& model);

// The one-line notice for a model with gaps ("--exact does not cover these yet on CUDA: Q4_K
// weights; speculative output may ..."); empty without gaps.
std::string exact_notice(const Model& model);

}  // namespace dspark
