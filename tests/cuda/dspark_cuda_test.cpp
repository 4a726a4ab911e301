// The block drafter on CUDA (bf16 weights and activations): the head cells against f32 CPU
// math, the drafter forward against the double reference (teacher-forced on the engine's own
// tokens, stated bf16 tolerances), and greedy losslessness through the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "cuda_consistency.h"
#include "dspark/ops/head_cells.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  return test::per_test_temp_dir("dspark_cuda", name);
}

// ---- head cells ---------------------------------------------------------------------------------

TEST(DSparkCudaHeadCells, SigmoidGateAndRnnCellMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Context cpu(Device::cpu());
  Context gpu(test::kTestGpu);
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t rows : {1, 7, 64}) {
      const int64_t r = 37;  // odd on purpose
      // proj f32 (a GEMM output), state / x / out in the activation dtype; state is a column
      // slice of a wider feature buffer as in the RNN head.
      const auto proj = test::random_pair(DType::f32, Shape{rows, 3 * r}, 11, 2.0f);
      const auto feat = test::random_pair(dtype, Shape{rows, 2 * r + 5}, 12, 1.0f);
      const OwnedTensor out_c(dtype, Shape{rows, r}, Device::cpu());
      const OwnedTensor out_g(dtype, Shape{rows, r}, test::kTestGpu);
      rnn_head_cell(cpu, proj.cpu, feat.cpu->slice(1, 0, r), out_c);
      rnn_head_cell(gpu, proj.gpu, feat.gpu->slice(1, 0, r), out_g);
      gpu.synchronize();
      const double tol = dtype == DType::f32 ? 1e-6 : 1e-2;
      EXPECT_LE(test::max_abs_error(to_f32_vector(out_g), to_f32_vector(out_c)), tol);
      EXPECT_LE(test::max_abs_error(to_f32_vector(feat.gpu), to_f32_vector(feat.cpu)), tol);

      const auto gate = test::random_pair(DType::f32, Shape{rows, r}, 13, 2.0f);
      sigmoid_gate(cpu, gate.cpu, feat.cpu->slice(1, r, 2 * r), out_c);
      sigmoid_gate(gpu, gate.gpu, feat.gpu->slice(1, r, 2 * r), out_g);
      gpu.synchronize();
      EXPECT_LE(test::max_abs_error(to_f32_vector(out_g), to_f32_vector(out_c)), tol);
    }
  }
}

// w2[j] . w1[x] in double (host copies of [cols, r] and [V, r]): the Markov bias of column j.
double markov_dot(const std::vector<float>& w1, const std::vector<float>& w2, int32_t x, int64_t j,
                  int64_t r) {
  double dot = 0;
  for (int64_t k = 0; k < r; ++k)
    dot += static_cast<double>(w2[static_cast<size_t>(j * r + k)]) *
           w1[static_cast<size_t>(x * r + k)];
  return dot;
}

// The fused greedy step of the vanilla Markov head against a double-precision host reference:
// z += w2 . w1[prev], next = argmax z (through an index map), several steps in a row (each
// reads the tokens the previous launch wrote, and the per-row arrival counters must be reset),
// over split chunk counts, vectorised and scalar rank paths, f32 and bf16 weights.
TEST(DSparkCudaHeadCells, MarkovGreedyStepMatchesReference) {
  DSPARK_REQUIRE_CUDA();
  Context gpu(test::kTestGpu);
  struct Shape3 {
    int64_t rows, cols, r;
  };
  const int64_t vocab = 300;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape3 sh :
         {Shape3{1, 100, 64}, Shape3{3, 4099, 96}, Shape3{2, 32785, 256}, Shape3{1, 777, 100}}) {
      for (bool with_map : {false, true}) {
        const std::string what = fmt::format("{} rows {} cols {} r {} map {}", dtype_name(dtype),
                                             sh.rows, sh.cols, sh.r, with_map);
        // Tokens index w1: the map's ids are < vocab, unmapped columns are ids themselves.
        const int64_t w1_rows = with_map ? vocab : sh.cols;
        const auto w1 = test::random_pair(dtype, Shape{w1_rows, sh.r}, 21, 1.0f);
        const auto w2 = test::random_pair(dtype, Shape{sh.cols, sh.r}, 22, 0.5f);
        const auto z0 = test::random_pair(DType::f32, Shape{sh.rows, sh.cols}, 23, 3.0f);
        std::vector<int32_t> map;
        for (int64_t j = 0; j < sh.cols; ++j)
          map.push_back(static_cast<int32_t>((3 * j + 1) % vocab));
        const OwnedTensor map_gpu = OwnedTensor::from_vector(map, Shape{sh.cols}, test::kTestGpu);
        // tokens [(steps + 1) * rows]: the anchors, then each step's tokens.
        constexpr int kSteps = 3;
        std::vector<int32_t> tokens = test::random_ints(static_cast<size_t>(sh.rows), 0,
                                                        static_cast<int32_t>(w1_rows - 1), 24);
        tokens.resize(static_cast<size_t>((kSteps + 1) * sh.rows), -1);
        const OwnedTensor tok_gpu = OwnedTensor::from_vector(
            tokens, Shape{static_cast<int64_t>(tokens.size())}, test::kTestGpu);
        const OwnedTensor z_gpu = OwnedTensor::copy_of(z0.gpu, test::kTestGpu);
        const std::vector<float> hw1 = test::read(w1.cpu), hw2 = test::read(w2.cpu);
        std::vector<float> hz = test::read(z0.cpu);
        const Tensor index_map = with_map ? map_gpu.view() : Tensor{};
        for (int step = 0; step < kSteps; ++step) {
          const Tensor prev = tok_gpu->slice(0, step * sh.rows, (step + 1) * sh.rows);
          const Tensor next = tok_gpu->slice(0, (step + 1) * sh.rows, (step + 2) * sh.rows);
          ASSERT_TRUE(markov_greedy_step(gpu, w1.gpu, w2.gpu, prev, z_gpu, next, index_map))
              << what;
          gpu.synchronize();
          const std::vector<int32_t> got = to_vector<int32_t>(tok_gpu.view());
          const std::vector<float> gz = test::read(z_gpu);
          for (int64_t i = 0; i < sh.rows; ++i) {
            // The reference: the token the kernel read (the previous step's, on the device).
            const int32_t x = got[static_cast<size_t>(step * sh.rows + i)];
            ASSERT_GE(x, 0) << what;
            int64_t best = 0;
            for (int64_t j = 0; j < sh.cols; ++j) {
              const double dot = markov_dot(hw1, hw2, x, j, sh.r);
              float& zr = hz[static_cast<size_t>(i * sh.cols + j)];
              zr = static_cast<float>(zr + dot);
              EXPECT_NEAR(gz[static_cast<size_t>(i * sh.cols + j)], zr, 1e-4 * (1 + std::abs(zr)))
                  << what << " step " << step << " row " << i << " col " << j;
              // The kernel's own argmax of its z (ties -> the smallest column).
              if (gz[static_cast<size_t>(i * sh.cols + j)] >
                  gz[static_cast<size_t>(i * sh.cols + best)])
                best = j;
            }
            const int32_t want =
                with_map ? map[static_cast<size_t>(best)] : static_cast<int32_t>(best);
            EXPECT_EQ(got[static_cast<size_t>((step + 1) * sh.rows + i)], want)
                << what << " step " << step << " row " << i;
            // Use the host z as it now is on the device (the next step builds on it).
            for (int64_t j = 0; j < sh.cols; ++j)
              hz[static_cast<size_t>(i * sh.cols + j)] = gz[static_cast<size_t>(i * sh.cols + j)];
          }
        }
      }
    }
  }
}

// The whole greedy loop in one launch against the same double reference, teacher-forced on the
// tokens the kernel chose: every step's z within 1e-4 relative, and every token the argmax of the
// kernel's own z row (ties -> the smallest column) through the map. Two launches in a row (the
// grid barrier's counters must be back at zero), rows 1..16, odd ranks (zero-padded in shared
// memory), vocabularies from 100 to 32k columns; a slice too large for shared memory is refused.
TEST(DSparkCudaHeadCells, MarkovGreedyLoopMatchesReference) {
  DSPARK_REQUIRE_CUDA();
  Context gpu(test::kTestGpu);
  struct Case {
    DType dtype;
    int64_t rows, cols, r;
  };
  const int64_t vocab = 300;
  const int64_t steps = 5;
  for (const Case c : {Case{DType::f32, 1, 100, 64}, Case{DType::f32, 3, 4099, 96},
                       Case{DType::f32, 2, 16001, 256}, Case{DType::bf16, 1, 777, 100},
                       Case{DType::bf16, 1, 32768, 256}, Case{DType::bf16, 16, 32768, 256},
                       Case{DType::bf16, 4, 5000, 37}}) {
    for (bool with_map : {false, true}) {
      const std::string what = fmt::format("{} rows {} cols {} r {} map {}", dtype_name(c.dtype),
                                           c.rows, c.cols, c.r, with_map);
      const int64_t w1_rows = with_map ? vocab : c.cols;
      const auto w1 = test::random_pair(c.dtype, Shape{w1_rows, c.r}, 31, 1.0f);
      const auto w2 = test::random_pair(c.dtype, Shape{c.cols, c.r}, 32, 0.5f);
      const auto z0 = test::random_pair(DType::f32, Shape{steps * c.rows, c.cols}, 33, 3.0f);
      std::vector<int32_t> map;
      for (int64_t j = 0; j < c.cols; ++j) map.push_back(static_cast<int32_t>((3 * j + 1) % vocab));
      const OwnedTensor map_gpu = OwnedTensor::from_vector(map, Shape{c.cols}, test::kTestGpu);
      const Tensor index_map = with_map ? map_gpu.view() : Tensor{};
      std::vector<int32_t> tokens =
          test::random_ints(static_cast<size_t>(c.rows), 0, static_cast<int32_t>(w1_rows - 1), 34);
      tokens.resize(static_cast<size_t>((steps + 1) * c.rows), -1);
      const std::vector<float> hw1 = test::read(w1.cpu), hw2 = test::read(w2.cpu);
      std::vector<int32_t> first;
      for (int launch = 0; launch < 2; ++launch) {
        const OwnedTensor tok_gpu = OwnedTensor::from_vector(
            tokens, Shape{static_cast<int64_t>(tokens.size())}, test::kTestGpu);
        const OwnedTensor z_gpu = OwnedTensor::copy_of(z0.gpu, test::kTestGpu);
        ASSERT_TRUE(
            markov_greedy_loop(gpu, w1.gpu, w2.gpu, tok_gpu, z_gpu, c.rows, steps, index_map))
            << what;
        gpu.synchronize();
        const std::vector<int32_t> got = to_vector<int32_t>(tok_gpu.view());
        const std::vector<float> gz = test::read(z_gpu);
        const std::vector<float> hz = test::read(z0.cpu);
        if (launch == 1) {
          EXPECT_EQ(got, first) << what << ": the second launch differs";
          continue;
        }
        first = got;
        for (int64_t s = 0; s < steps; ++s) {
          for (int64_t i = 0; i < c.rows; ++i) {
            const int32_t x = got[static_cast<size_t>(s * c.rows + i)];
            ASSERT_GE(x, 0) << what;
            ASSERT_LT(x, w1_rows) << what;
            const size_t row = static_cast<size_t>((s * c.rows + i) * c.cols);
            int64_t best = 0;
            for (int64_t j = 0; j < c.cols; ++j) {
              const double want =
                  hz[row + static_cast<size_t>(j)] + markov_dot(hw1, hw2, x, j, c.r);
              ASSERT_NEAR(gz[row + static_cast<size_t>(j)], want, 1e-4 * (1 + std::abs(want)))
                  << what << " step " << s << " row " << i << " col " << j;
              if (gz[row + static_cast<size_t>(j)] > gz[row + static_cast<size_t>(best)]) best = j;
            }
            const int32_t want =
                with_map ? map[static_cast<size_t>(best)] : static_cast<int32_t>(best);
            EXPECT_EQ(got[static_cast<size_t>((s + 1) * c.rows + i)], want)
                << what << " step " << s << " row " << i;
          }
        }
      }
    }
  }
  // A full 152k-column w2 in bf16 does not fit the shared memory of the multiprocessors: refused,
  // nothing written (the caller runs the per-step kernel).
  const int64_t cols = 151936, r = 256;
  const auto w = test::random_pair(DType::bf16, Shape{cols, r}, 35, 0.5f);
  const OwnedTensor z(DType::f32, Shape{2, cols}, test::kTestGpu);
  const OwnedTensor tok =
      OwnedTensor::from_vector(std::vector<int32_t>{5, -1, -1}, Shape{3}, test::kTestGpu);
  EXPECT_FALSE(markov_greedy_loop(gpu, w.gpu, w.gpu, tok, z, 1, 2, Tensor{}));
  gpu.synchronize();
  EXPECT_EQ(to_vector<int32_t>(tok.view()), (std::vector<int32_t>{5, -1, -1}));
}

// ---- forward vs the reference (bf16) ------------------------------------------------------------

struct Case {
  std::string target;
  std::string layout;
  std::string markov;
  int gamma;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return fmt::format("{}_{}_{}_g{}", info.param.target, info.param.layout, info.param.markov,
                     info.param.gamma);
}

class DSparkCudaForward : public ::testing::TestWithParam<Case> {};

// Case c's tiny target in bf16 (null when tests/data lacks it) and a tiny drafter of c's layout
// for it, written to `dir` with `seed`.
std::unique_ptr<Model> bf16_target_with_drafter(const Case& c, uint32_t seed,
                                                const std::filesystem::path& dir) {
  const auto target_dir = test::data_dir() / "models" / c.target;
  if (!std::filesystem::exists(target_dir / "config.json")) return nullptr;
  auto target = load_model(target_dir, test::kTestGpu, DType::bf16);
  test::TinyDrafterSpec spec;
  spec.layout = c.layout;
  spec.markov = c.markov;
  spec.block_size = c.gamma;
  spec.seed = seed;
  test::write_tiny_drafter(dir, spec, target->config());
  return target;
}

// Tolerances (bf16 weights, activations and target taps vs a double reference fed with the same
// bf16 target's taps): relative RMS <= 3e-2 for context features and hidden states, <= 5e-2 for
// the logits, confidences within 3e-2, and every decisive greedy token (reference top-2 gap
// > 0.3 x the logits' RMS) identical. The reference follows the engine's tokens (teacher
// forcing), so a near-tie that bf16 resolves differently does not derail the comparison.
TEST_P(DSparkCudaForward, MatchesReferenceInBf16) {
  DSPARK_REQUIRE_CUDA();
  const Case& c = GetParam();
  const auto dir = temp_dir("drafter");
  auto target = bf16_target_with_drafter(c, static_cast<uint32_t>(c.gamma + 7), dir);
  if (target == nullptr) GTEST_SKIP() << "no " << c.target;
  Context ctx(test::kTestGpu);
  const test::ReferenceDrafter ref(dir, test::data_dir() / "models" / c.target);
  DSparkSourceOptions opt;
  opt.block_size = c.gamma;
  opt.record = true;
  for (int n_rows : {1, 3}) {
    auto source = load_dspark_source(dir, *target, opt);
    std::vector<std::vector<int32_t>> prompts;
    std::mt19937 gen(static_cast<uint32_t>(n_rows));
    for (int i = 0; i < n_rows; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(9 + 4 * i));
      for (auto& t : p) t = static_cast<int32_t>(gen() % target->config().vocab_size);
      prompts.push_back(p);
    }
    const test::DriveStats st =
        test::drive_and_compare(*target, ctx, *source, ref, prompts, 3, {0, 2, 100}, true, 0.3);
    std::printf(
        "[ dspark   ] cuda %s rows=%d: features %.2e hidden %.2e base %.2e z %.2e conf "
        "%.2e decisive tokens %lld/%lld (all %lld/%lld)\n",
        case_name({c, 0}).c_str(), n_rows, st.features, st.hidden, st.base, st.corrected,
        st.confidence, static_cast<long long>(st.tokens_decisive_equal),
        static_cast<long long>(st.tokens_decisive), static_cast<long long>(st.tokens_equal),
        static_cast<long long>(st.tokens));
    if (n_rows == 1) {
      EXPECT_LE(st.features, 3e-2);
    }
    EXPECT_LE(st.hidden, 3e-2);
    EXPECT_LE(st.base, 5e-2);
    EXPECT_LE(st.corrected, 5e-2);
    EXPECT_LE(st.confidence, 3e-2);
    EXPECT_EQ(st.tokens_decisive_equal, st.tokens_decisive);
    EXPECT_GT(st.tokens_decisive, 0);
    EXPECT_EQ(source->dspark_stats().n_rows_projected, st.rows_committed);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, DSparkCudaForward,
                         ::testing::Values(Case{"qwen3", "deepspec", "vanilla", 7},
                                           Case{"qwen3", "dflash", "none", 16},
                                           Case{"llama3", "specforge", "rnn", 4},
                                           Case{"llama3", "deepspec", "gated", 16}),
                         case_name);

// FP8 drafter weights (DSparkSourceOptions::fp8_weights: the projections, the context projection
// fc and the LM head in E4M3 with per-row scales) against the same double reference as above
// (full-precision weights): the quantization error of 3 mantissa bits on top of bf16's, so
// relative RMS <= 0.05 for the context features (one FP8 projection: 2.4-2.5e-2 on the H200)
// and <= 0.1 for hidden states, logits and confidences, and every
// greedy token whose reference top-2 gap exceeds half the logits' RMS identical (at least one such
// token over the cases). With and without a draft vocabulary (its cut LM head, or the whole head,
// quantized).
TEST(DSparkCudaFp8, MatchesReferenceWithinFp8Error) {
  DSPARK_REQUIRE_CUDA();
  int64_t decisive = 0;
  for (const Case& c :
       {Case{"qwen3", "deepspec", "vanilla", 7}, Case{"llama3", "dflash", "none", 16}}) {
    const auto dir = temp_dir("fp8");
    auto target = bf16_target_with_drafter(c, static_cast<uint32_t>(c.gamma + 11), dir);
    if (target == nullptr) GTEST_SKIP() << "no " << c.target;
    Context ctx(test::kTestGpu);
    const test::ReferenceDrafter ref(dir, test::data_dir() / "models" / c.target);
    for (bool vocab : {false, true}) {
      DSparkSourceOptions opt;
      opt.block_size = c.gamma;
      opt.record = true;
      opt.fp8_weights = true;
      if (vocab)  // every id: the cut head is the whole head, quantized through the cut path
        for (int32_t id = 0; id < target->config().vocab_size; ++id) opt.draft_vocab.push_back(id);
      auto source = load_dspark_source(dir, *target, opt);
      std::vector<std::vector<int32_t>> prompts = {{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}};
      const test::DriveStats st =
          test::drive_and_compare(*target, ctx, *source, ref, prompts, 3, {0, 2, 100}, true, 0.5);
      std::printf(
          "[ dspark   ] cuda fp8 %s vocab=%d: features %.2e hidden %.2e base %.2e z %.2e conf "
          "%.2e decisive tokens %lld/%lld (all %lld/%lld)\n",
          case_name({c, 0}).c_str(), vocab ? 1 : 0, st.features, st.hidden, st.base, st.corrected,
          st.confidence, static_cast<long long>(st.tokens_decisive_equal),
          static_cast<long long>(st.tokens_decisive), static_cast<long long>(st.tokens_equal),
          static_cast<long long>(st.tokens));
      EXPECT_LE(st.features, 5e-2);
      EXPECT_LE(st.hidden, 0.1);
      EXPECT_LE(st.base, 0.1);
      EXPECT_LE(st.corrected, 0.1);
      EXPECT_LE(st.confidence, 0.1);
      EXPECT_EQ(st.tokens_decisive_equal, st.tokens_decisive);
      decisive += st.tokens_decisive;
    }
  }
  EXPECT_GT(decisive, 0);  // some tokens were compared (a random tiny drafter has few)
}

// ---- the published-layout fixtures in bf16 ------------------------------------------------------

std::string fixture_name(const ::testing::TestParamInfo<test::FixtureName>& p) {
  return p.param.fixture;
}

class DSparkCudaFixture : public ::testing::TestWithParam<test::FixtureName> {};

// bf16 against the float64 goldens (fed the goldens' own f32 taps): context features and hidden
// states within relative RMS 3e-2, base logits within 5e-2, confidences within 3e-2 up to the
// first token that differs, and identical greedy tokens up to the first row whose golden margin
// is below 1.0 (bf16 logit errors on these std-8 logits reach ~0.5: docs/drafter-goldens.md).
TEST_P(DSparkCudaFixture, MatchesPyTorchReferenceInBf16) {
  DSPARK_REQUIRE_CUDA();
  const test::FixtureName& f = GetParam();
  const test::FixtureResult r =
      test::run_drafter_fixture(f.fixture, f.target, test::kTestGpu, DType::bf16, 1.0);
  if (!r.present) GTEST_SKIP() << "fixture " << f.fixture << " missing";
  std::printf("[ fixture  ] cuda bf16 %-19s taps %.2e features %.2e\n", f.fixture.c_str(), r.taps,
              r.features);
  EXPECT_LE(r.features, 3e-2);
  for (const test::FixtureGamma& g : r.gammas) {
    std::printf(
        "[ fixture  ] cuda bf16 %-19s g%-2d hidden %.2e base %.2e z %.2e conf %.2e "
        "tokens %d/%d (decisive %d/%d)\n",
        f.fixture.c_str(), g.gamma, g.hidden, g.base, g.corrected, g.confidence, g.tokens_equal,
        g.tokens, g.decisive_equal, g.decisive_tokens);
    EXPECT_LE(g.hidden, 3e-2) << "gamma " << g.gamma;
    EXPECT_LE(g.base, 5e-2) << "gamma " << g.gamma;
    EXPECT_LE(g.confidence, 3e-2) << "gamma " << g.gamma;
    EXPECT_EQ(g.decisive_equal, g.decisive_tokens) << "gamma " << g.gamma;
    if (g.tokens_equal == g.tokens) {
      EXPECT_LE(g.corrected, 5e-2) << "gamma " << g.gamma;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, DSparkCudaFixture, ::testing::ValuesIn(test::drafter_fixtures()),
                         fixture_name);

// ---- greedy losslessness (f32 on CUDA)
// -----------------------------------------------------------------

std::string lossless_name(const ::testing::TestParamInfo<test::LosslessCase>& info) {
  const test::LosslessCase& c = info.param;
  return fmt::format("{}_{}_{}_g{}{}", c.target, c.layout, c.markov, c.gamma,
                     c.thresholds ? "_thr" : "");
}

class DSparkCudaLossless : public ::testing::TestWithParam<test::LosslessCase> {};

// In f32 on the GPU (cuBLASLt f32 GEMMs, the CUDA kernels of every op): the tiny targets' greedy
// margins are above f32 error but not above bf16 error, and bf16 verify batches may round
// differently from single-token decode steps (tests/common/lossless.h).
TEST_P(DSparkCudaLossless, GreedySpeculativeEqualsPlainGreedy) {
  DSPARK_REQUIRE_CUDA();
  test::check_dspark_lossless(GetParam(), test::kTestGpu, temp_dir("drafter"), DType::f32);
}

// Deferred context commits on the GPU, with the target's graphs on (graphed commits of staged
// rows): greedy output == plain greedy, committed == projected + dropped (rounds whose drafts
// differ from eager commits are counted in the output line).
TEST(DSparkCudaDeferredCommit, StagedRowsResumeLosslessly) {
  DSPARK_REQUIRE_CUDA();
  test::check_deferred_commits(test::kTestGpu, temp_dir("deferred"), /*bitwise=*/false);
}

std::vector<test::LosslessCase> lossless_cases() {
  std::vector<test::LosslessCase> out;
  for (const std::string target : {"qwen3", "llama3"})
    for (int gamma : {4, 7, 16}) {
      out.push_back({target, "deepspec", "vanilla", gamma, false});
      out.push_back({target, "deepspec", "vanilla", gamma, true});
      out.push_back({target, "dflash", "none", gamma, false});
    }
  out.push_back({"qwen3", "specforge", "rnn", 7, true});
  out.push_back({"llama3", "deepspec", "gated", 7, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DSparkCudaLossless, ::testing::ValuesIn(lossless_cases()),
                         lossless_name);

// ---- CUDA graphs of the drafter's greedy rounds ---------------------------------------------

struct GraphCase {
  std::string target, layout, markov;
  int gamma = 4;
  bool draft_vocab = false;
};

std::string graph_case_name(const ::testing::TestParamInfo<GraphCase>& info) {
  const GraphCase& c = info.param;
  return fmt::format("{}_{}_{}_g{}{}", c.target, c.layout, c.markov, c.gamma,
                     c.draft_vocab ? "_vocab" : "");
}

class DSparkCudaGraphs : public ::testing::TestWithParam<GraphCase> {};

// With the target's graphs on, the drafter's greedy rounds are captured and replayed: the same
// tokens and the same acceptance as eager rounds (f32: a replay runs the eager kernels on the
// bucket's buffers), batched rows finishing at different times (several buckets), no failed
// capture, and replays that were not captures. The RNN head bakes its state zeros in. The same
// for the context commits (a wrong replayed commit changes the drafter's K/V, hence its drafts and
// the accepted counts).
TEST_P(DSparkCudaGraphs, ReplayedRoundsEqualEagerRounds) {
  DSPARK_REQUIRE_CUDA();
  const GraphCase& c = GetParam();
  const auto target_dir = test::data_dir() / "models" / c.target;
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no " << c.target;
  Context ctx(test::kTestGpu);
  auto target = load_model(target_dir, test::kTestGpu, DType::f32);
  const auto dir = temp_dir("graphs");
  test::TinyDrafterSpec spec;
  spec.layout = c.layout;
  spec.markov = c.markov;
  spec.block_size = c.gamma;
  spec.seed = static_cast<uint32_t>(c.gamma + 300);
  test::write_tiny_drafter(dir, spec, target->config());
  const auto prompts = test::lossless_prompts(target->config().vocab_size);

  DSparkSourceOptions opt;
  opt.block_size = c.gamma;
  opt.kv_tokens = 4096;
  if (c.draft_vocab)
    for (int32_t id = 0; id < target->config().vocab_size; id += 2) opt.draft_vocab.push_back(id);
  struct Run {
    std::vector<RequestOutput> out;
    DSparkStats stats;
  };
  auto run = [&](bool graphs) {
    target->set_cuda_graphs(graphs);
    auto source = load_dspark_source(dir, *target, opt);
    std::vector<RequestInput> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateOptions o;
      o.max_tokens = 24 + 6 * static_cast<int>(i);  // rows finish at different rounds
      o.eos_token_ids = {};
      reqs.push_back(RequestInput{prompts[i], o, nullptr, {}});
    }
    SpecConfig cfg;
    cfg.gamma = c.gamma;
    Run r;
    r.out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
    r.stats = source->dspark_stats();
    return r;
  };
  const Run eager = run(false);
  const Run graphed = run(true);
  target->set_cuda_graphs(false);
  ASSERT_EQ(eager.out.size(), graphed.out.size());
  for (size_t i = 0; i < eager.out.size(); ++i) {
    EXPECT_EQ(graphed.out[i].result.tokens, eager.out[i].result.tokens) << "prompt " << i;
    EXPECT_EQ(graphed.out[i].spec.drafted, eager.out[i].spec.drafted) << "prompt " << i;
    EXPECT_EQ(graphed.out[i].spec.accepted, eager.out[i].spec.accepted) << "prompt " << i;
  }
  EXPECT_EQ(eager.stats.n_graph_replays, 0);
  EXPECT_EQ(graphed.stats.n_graph_fallbacks, 0);
  EXPECT_GT(graphed.stats.n_graph_captures, 0);
  EXPECT_GT(graphed.stats.n_graph_replays, graphed.stats.n_graph_captures);
  EXPECT_EQ(graphed.stats.n_rounds, eager.stats.n_rounds);
  // The context commits too (padded row counts, one bucket per count and tap set).
  EXPECT_EQ(eager.stats.n_commit_graph_replays, 0);
  EXPECT_EQ(graphed.stats.n_commit_graph_fallbacks, 0);
  EXPECT_GT(graphed.stats.n_commit_graph_captures, 0);
  EXPECT_GT(graphed.stats.n_commit_graph_replays, graphed.stats.n_commit_graph_captures);
  EXPECT_EQ(graphed.stats.n_rows_projected, eager.stats.n_rows_projected);
  std::printf(
      "[ graphs ] %s %s %s gamma=%d vocab=%d rounds=%lld replays=%lld captures=%lld "
      "commits=%lld commit replays=%lld captures=%lld\n",
      c.target.c_str(), c.layout.c_str(), c.markov.c_str(), c.gamma, c.draft_vocab ? 1 : 0,
      static_cast<long long>(graphed.stats.n_rounds),
      static_cast<long long>(graphed.stats.n_graph_replays),
      static_cast<long long>(graphed.stats.n_graph_captures),
      static_cast<long long>(graphed.stats.n_commits),
      static_cast<long long>(graphed.stats.n_commit_graph_replays),
      static_cast<long long>(graphed.stats.n_commit_graph_captures));
}

INSTANTIATE_TEST_SUITE_P(Heads, DSparkCudaGraphs,
                         ::testing::Values(GraphCase{"qwen3", "deepspec", "vanilla", 7, false},
                                           GraphCase{"qwen3", "deepspec", "vanilla", 16, true},
                                           GraphCase{"qwen3", "specforge", "rnn", 7, false},
                                           GraphCase{"llama3", "deepspec", "gated", 4, false},
                                           GraphCase{"llama3", "dflash", "none", 7, false}),
                         graph_case_name);

}  // namespace
}  // namespace dspark
