// CUDA-graph replay of the target forward (Model::set_cuda_graphs, backend/graph_cache.h) against
// the eager forward of a second instance of the same model: for several steps of decode (batch 1
// and 4) and verify (k = 4 and 16, with rollback of rejected tokens), logits, hidden taps and the
// whole KV pool must be bitwise equal, while the context grows across attention split-count buckets
// (each a separate graph). Greedy generation (plain and speculative) with graphs must emit the
// same tokens as without. Every test also checks that graphs were really captured and replayed.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>

#include "common/test_util.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/backend/graph_set.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/spec/source_factory.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr int kPageSize = 16;
constexpr int kNumPages = 256;

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * t.element_size());
  if (!out.empty()) cuda::memcpy_sync(out.data(), t.data(), out.size());
  return out;
}

// Index of the first differing element (as f32 for f32 tensors), or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                         size_t element_size) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i / element_size);
  return -1;
}

class GraphForwardCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device";
    dir_ = test::golden_models_dir() / "qwen3";
    if (!std::filesystem::exists(dir_)) GTEST_SKIP() << "no fixture " << dir_;
  }

  // Runs `steps` steps of R rows x T tokens on an eager and a graphed model and compares every
  // output and the KV pools after every step. After each verify step (T > 1) each row keeps a
  // random 1..T of its T new tokens (rollback of rejected drafts).
  // With `argmax`, every batch but the prefill asks for the forward's argmax (want_argmax):
  // eager and graphed give the same, the argmax of their logits.
  void run_and_compare(int n_rows, int tokens_per_row, int steps, bool all_logits,
                       std::vector<int> taps, bool argmax = false) {
    // One context each: scratch growth by one model must not force recaptures in the other.
    Context ctx_e(Device::cuda(0)), ctx_g(Device::cuda(0));
    auto eager = load_model(dir_, Device::cuda(0), DType::bf16);
    auto graphed = load_model(dir_, Device::cuda(0), DType::bf16);
    eager->set_cuda_graphs(false);
    graphed->set_cuda_graphs(true);
    ASSERT_TRUE(graphed->cuda_graphs());
    const ModelConfig& c = eager->config();
    PagedKvCache kv_e(eager->kv_shape(kPageSize, kNumPages), Device::cuda(0));
    PagedKvCache kv_g(graphed->kv_shape(kPageSize, kNumPages), Device::cuda(0));
    for (PagedKvCache* kv : {&kv_e, &kv_g}) {
      for (int l = 0; l < c.num_layers; ++l) {
        for (const Tensor& t : {kv->k_pages(l), kv->v_pages(l)})
          cuda::memset_sync(t.data(), 0, static_cast<size_t>(t.numel()) * t.element_size());
      }
    }
    std::mt19937 gen(1234);
    std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
    std::vector<SeqId> seqs_e, seqs_g;
    for (int r = 0; r < n_rows; ++r) {
      seqs_e.push_back(kv_e.create_sequence());
      seqs_g.push_back(kv_g.create_sequence());
    }

    auto compare = [&](const ForwardBatch& b_e, const ForwardBatch& b_g, const std::string& what) {
      const ForwardOutput o_e = eager->forward(ctx_e, kv_e, b_e);
      const std::vector<uint8_t> logits_e = raw_bytes(o_e.logits);
      std::vector<std::vector<uint8_t>> taps_e;
      for (const Tensor& t : o_e.taps) taps_e.push_back(raw_bytes(t));
      const ForwardOutput o_g = graphed->forward(ctx_g, kv_g, b_g);
      ctx_g.synchronize();  // (reads on the legacy stream wait for it anyway; greedy test below)
      ASSERT_EQ(o_g.logits.shape(), o_e.logits.shape()) << what;
      const std::vector<uint8_t> logits_g = raw_bytes(o_g.logits);
      EXPECT_EQ(first_difference(logits_g, logits_e, 4), -1) << what << ": logits differ";
      ASSERT_EQ(o_g.taps.size(), taps_e.size());
      for (size_t i = 0; i < taps_e.size(); ++i)
        EXPECT_EQ(first_difference(raw_bytes(o_g.taps[i]), taps_e[i], 2), -1)
            << what << ": tap " << i << " differs";
      if (b_g.want_argmax) {
        ctx_e.synchronize();
        ASSERT_NE(o_e.argmax, nullptr) << what;
        ASSERT_NE(o_g.argmax, nullptr) << what;
        const auto rows = static_cast<size_t>(o_g.logits.size(0));
        const auto vocab = static_cast<size_t>(o_g.logits.size(1));
        std::vector<float> lg(rows * vocab);
        std::memcpy(lg.data(), logits_g.data(), lg.size() * sizeof(float));
        for (size_t r = 0; r < rows; ++r) {
          const auto* row = lg.data() + r * vocab;
          const auto best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
          EXPECT_EQ(o_g.argmax[r], best) << what << ": argmax of row " << r;
          EXPECT_EQ(o_e.argmax[r], best) << what << ": eager argmax of row " << r;
        }
      }
      for (int l = 0; l < c.num_layers; ++l) {
        EXPECT_EQ(first_difference(raw_bytes(kv_g.k_pages(l)), raw_bytes(kv_e.k_pages(l)), 2), -1)
            << what << ": K of layer " << l << " differs";
        EXPECT_EQ(first_difference(raw_bytes(kv_g.v_pages(l)), raw_bytes(kv_e.v_pages(l)), 2), -1)
            << what << ": V of layer " << l << " differs";
      }
    };
    auto make_batch = [&](const std::vector<SeqId>& seqs, const std::vector<int>& counts,
                          const std::vector<int32_t>& tokens, bool every_logit,
                          bool want_argmax = false) {
      ForwardBatch b;
      b.want_argmax = want_argmax;
      b.tokens = tokens;
      b.seqs = seqs;
      b.row_indptr = {0};
      for (int n : counts) b.row_indptr.push_back(b.row_indptr.back() + n);
      for (size_t r = 0; r < counts.size(); ++r) {
        if (every_logit) {
          for (int i = b.row_indptr[r]; i < b.row_indptr[r + 1]; ++i) b.logit_indices.push_back(i);
        } else {
          b.logit_indices.push_back(b.row_indptr[r + 1] - 1);
        }
      }
      b.tap_layers = taps;
      return b;
    };

    // Prompts of different lengths per row.
    std::vector<int> lengths(static_cast<size_t>(n_rows));
    {
      std::vector<int> counts;
      std::vector<int32_t> tokens;
      for (int r = 0; r < n_rows; ++r) {
        counts.push_back(20 + 7 * r);
        for (int i = 0; i < counts.back(); ++i) tokens.push_back(token(gen));
        lengths[static_cast<size_t>(r)] = counts.back();
      }
      compare(make_batch(seqs_e, counts, tokens, false), make_batch(seqs_g, counts, tokens, false),
              "prefill");
    }

    std::map<int, int> splits;  // split count -> steps
    std::uniform_int_distribution<int> keep(1, tokens_per_row);
    for (int step = 0; step < steps && !HasFailure(); ++step) {
      std::vector<int> counts(static_cast<size_t>(n_rows), tokens_per_row);
      std::vector<int32_t> tokens;
      int total_pages = 0;
      for (int r = 0; r < n_rows; ++r) {
        for (int i = 0; i < tokens_per_row; ++i) tokens.push_back(token(gen));
        total_pages +=
            (lengths[static_cast<size_t>(r)] + tokens_per_row + kPageSize - 1) / kPageSize;
      }
      ++splits[attention_graph_variant(
          ctx_g, AttentionGraphShape{int64_t{n_rows} * tokens_per_row, c.num_heads, c.num_kv_heads,
                                     n_rows, total_pages, kPageSize})];
      compare(make_batch(seqs_e, counts, tokens, all_logits, argmax),
              make_batch(seqs_g, counts, tokens, all_logits, argmax), fmt::format("step {}", step));
      for (int r = 0; r < n_rows; ++r) {
        int& len = lengths[static_cast<size_t>(r)];
        len += tokens_per_row == 1 ? 1 : keep(gen);  // verify: roll back the rejected drafts
        kv_e.rollback_to(seqs_e[static_cast<size_t>(r)], len);
        kv_g.rollback_to(seqs_g[static_cast<size_t>(r)], len);
      }
    }

    // The graphs were really used: per split count, the first step runs eagerly (warm-up), the
    // second captures (and replays at once), later ones replay. The prefill shape only warms up.
    // The context crossed at least one split-count boundary.
    int64_t want_captures = 0, want_replays = 0;
    for (const auto& [n_splits, n_steps] : splits) {
      want_captures += n_steps >= 2 ? 1 : 0;
      want_replays += n_steps - 1;
    }
    const ForwardStats s = graphed->forward_stats();
    std::cout << "[graphs] rows " << n_rows << " x " << tokens_per_row << ": " << s.forwards
              << " forwards, " << s.graph_captures << " captures, " << s.graph_replays
              << " replays, " << splits.size() << " split counts, host " << s.host_ms / s.forwards
              << " ms/forward (eager " << eager->forward_stats().host_ms / s.forwards << ")\n";
    EXPECT_GE(splits.size(), 2u) << "the test did not cross a split-count boundary";
    EXPECT_EQ(s.forwards, steps + 1);
    EXPECT_EQ(s.graph_fallbacks, 0);
    EXPECT_EQ(s.graph_captures, want_captures);
    EXPECT_EQ(s.graph_replays, want_replays);
    EXPECT_EQ(eager->forward_stats().graph_replays, 0);
    // Host time of the pure replays (not the capturing launches): staged and launched within it.
    EXPECT_EQ(s.step_replays, s.graph_replays - s.graph_captures);
    EXPECT_EQ(eager->forward_stats().step_replays, 0);
    EXPECT_GT(s.step_launch_ms, 0.0);
    EXPECT_GT(s.step_stage_ms, 0.0);
    EXPECT_GE(s.step_replay_host_ms, s.step_stage_ms + s.step_launch_ms);
  }

  std::filesystem::path dir_;
};

TEST_F(GraphForwardCuda, DecodeBatch1) {
  run_and_compare(1, 1, 160, false, {});
}

TEST_F(GraphForwardCuda, DecodeBatch4WithTaps) {
  run_and_compare(4, 1, 120, false, {-1, 1, 3});
}

TEST_F(GraphForwardCuda, VerifyK4Batch1) {
  run_and_compare(1, 5, 60, true, {});
}

// A verify of 17 tokens with taps (from the norm after the MLP: ResidualNorm::tap) and the
// forward's argmax (the greedy verify's).
TEST_F(GraphForwardCuda, VerifyK16Batch1WithTapsAndArgmax) {
  run_and_compare(1, 17, 40, true, {-1, 0, 2}, true);
}

TEST_F(GraphForwardCuda, VerifyK16Batch4) {
  run_and_compare(4, 17, 24, true, {0, 2});
}

// Verify widths cycling like a speculative request's last rounds (gamma 16 with rejected drafts:
// 17 tokens, then 16, 15, ..., 1), at a fixed context: 18 shapes with the prompt's. Least recently
// used eviction of a cycle longer than the cache misses every time (as a cache of 16 buckets
// did): after a warm-up pass (eager) and a capture pass, every width of a third pass
// must replay its graph.
TEST_F(GraphForwardCuda, VerifyWidthCycleStaysCaptured) {
  Context ctx(Device::cuda(0));
  auto model = load_model(dir_, Device::cuda(0), DType::bf16);
  model->set_cuda_graphs(true);
  ASSERT_TRUE(model->cuda_graphs());
  PagedKvCache kv(model->kv_shape(kPageSize, kNumPages), Device::cuda(0));
  const SeqId seq = kv.create_sequence();
  std::mt19937 gen(99);
  std::uniform_int_distribution<int32_t> token(0, model->config().vocab_size - 1);
  auto batch = [&](int n) {
    ForwardBatch b;
    for (int i = 0; i < n; ++i) b.tokens.push_back(token(gen));
    b.seqs = {seq};
    b.row_indptr = {0, n};
    for (int i = 0; i < n; ++i) b.logit_indices.push_back(i);
    return b;
  };
  constexpr int kPrompt = 40;
  model->forward(ctx, kv, batch(kPrompt));
  for (int pass = 0; pass < 3; ++pass) {
    const ForwardStats before = model->forward_stats();
    for (int width = 17; width >= 1; --width) {
      model->forward(ctx, kv, batch(width));
      kv.rollback_to(seq, kPrompt);  // every width at the same context (same split count)
    }
    ctx.synchronize();
    const ForwardStats after = model->forward_stats();
    EXPECT_EQ(after.graph_fallbacks, 0);
    if (pass == 2) {
      EXPECT_EQ(after.graph_captures - before.graph_captures, 0) << "pass 3 captured again";
      EXPECT_EQ(after.graph_replays - before.graph_replays, 17) << "pass 3 did not replay";
    }
  }
}

// Greedy generation through the engine: plain decoding and prompt-lookup speculation (verify
// batches of varying width) emit the same tokens with graphs as without.
TEST_F(GraphForwardCuda, GreedyGenerateSameTokens) {
  Context ctx(Device::cuda(0));
  auto eager = load_model(dir_, Device::cuda(0), DType::bf16);
  auto graphed = load_model(dir_, Device::cuda(0), DType::bf16);
  eager->set_cuda_graphs(false);
  graphed->set_cuda_graphs(true);
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> token(0, eager->config().vocab_size - 1);
  std::vector<RequestInput> requests;
  for (int p = 0; p < 3; ++p) {
    RequestInput r;
    for (int i = 0; i < 12 + 5 * p; ++i) r.prompt.push_back(token(gen));
    // A repeated stretch so that prompt lookup proposes drafts.
    const std::vector<int32_t> head(r.prompt.begin(), r.prompt.begin() + 8);
    r.prompt.insert(r.prompt.end(), head.begin(), head.end());
    r.options.max_tokens = 96;
    r.options.eos_token_ids = {};
    requests.push_back(std::move(r));
  }
  for (const char* draft : {"none", "ngram"}) {
    SpecConfig cfg;
    cfg.gamma = 4;
    DraftOptions o;
    o.draft = draft;
    CreatedSource src_e = create_draft_source(o, *eager);
    CreatedSource src_g = create_draft_source(o, *graphed);
    graphed->reset_forward_stats();
    const auto out_e = generate_speculative(*eager, ctx, src_e.source.get(), requests, cfg);
    const auto out_g = generate_speculative(*graphed, ctx, src_g.source.get(), requests, cfg);
    ASSERT_EQ(out_e.size(), out_g.size());
    for (size_t i = 0; i < out_e.size(); ++i) {
      EXPECT_EQ(out_g[i].result.tokens, out_e[i].result.tokens)
          << "draft " << draft << ", prompt " << i;
      EXPECT_EQ(out_g[i].result.tokens.size(), 96u);
    }
    const ForwardStats s = graphed->forward_stats();
    EXPECT_GT(s.graph_replays, 0) << draft;
    EXPECT_EQ(s.graph_fallbacks, 0) << draft;
  }
}

}  // namespace
}  // namespace dspark
