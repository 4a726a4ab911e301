// Shared by the quantized-drafter tests on the CPU (tests/unit/quantize_drafter_test.cpp) and on
// CUDA (tests/cuda/quantized_drafter_cuda_test.cpp): checkpoints quantized by dspark quantize's
// library into scratch directories, and greedy speculative == plain greedy with a drafter.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dspark/model/quantize_checkpoint.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/quantize_drafter.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark::test {

// `src` (a target or a DFlash / DSpark drafter, which gets the drafter policy) quantized with
// `spec` into a fresh scratch directory named by `tag`.
inline std::filesystem::path quantized_copy(const std::filesystem::path& src,
                                            const std::string& tag, MlxQuantSpec spec) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      fmt::format("dspark_qdrafter_{}_b{}_g{}_{}", tag, spec.bits, spec.group_size, ::getpid());
  std::filesystem::remove_all(out);
  QuantizeOptions o;
  o.input = src;
  o.output = out;
  o.spec = spec;
  if (is_block_drafter_dir(src)) {
    quantize_drafter(o, nullptr);
  } else {
    quantize_checkpoint(o, nullptr);
  }
  return out;
}

// Greedy speculative decoding of `target` with the drafter at `drafter` (block size = gamma)
// emits exactly the plain greedy tokens, for each gamma. `one_at_a_time`: one prompt per call
// (a block-quantized target on CUDA: verifies of up to 4 rows run the kernel that decoding runs,
// so keep gamma <= 3), else all prompts batched.
inline void expect_drafter_lossless(Model& target, Context& ctx,
                                    const std::filesystem::path& drafter,
                                    const std::vector<int>& gammas, bool one_at_a_time,
                                    const std::string& what) {
  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};
  const auto prompts = lossless_prompts(target.config().vocab_size);
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(target, ctx, p, o).tokens);
  for (int gamma : gammas) {
    DSparkSourceOptions opt;
    opt.block_size = gamma;
    auto source = load_dspark_source(drafter, target, opt, false);
    SpecConfig cfg;
    cfg.gamma = gamma;
    const size_t step = one_at_a_time ? 1 : prompts.size();
    for (size_t first = 0; first < prompts.size(); first += step) {
      std::vector<RequestInput> reqs;
      for (size_t i = first; i < first + step; ++i)
        reqs.push_back(RequestInput{prompts[i], o, nullptr, {}});
      const auto out = generate_speculative(target, ctx, source.get(), std::move(reqs), cfg);
      for (size_t i = 0; i < step; ++i) {
        EXPECT_EQ(out[i].result.tokens, plain[first + i])
            << what << " gamma " << gamma << " prompt " << first + i;
      }
    }
    EXPECT_GT(source->stats().n_drafted, 0) << what;
  }
}

}  // namespace dspark::test
