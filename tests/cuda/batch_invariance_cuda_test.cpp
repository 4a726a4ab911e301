// Batch invariance of the target forward on CUDA with Tuning::batch_invariant (`--exact`): in bf16,
// the logits of a row's positions in a verify of k tokens equal, bit for bit, those of the same
// positions decoded one token at a time, for k = 1 .. 32, alone and with other requests' rows
// before and after it in the same forward (a decode row, another verify, a prefill chunk), and
// with 31 other decode rows. The fixtures are the golden models (dense, MoE, MLA + MoE, GLM-5's
// MLA + MoE with DeepSeek sparse attention; attention on CUDA cores: head_dim 8 to 32, a sliding
// window), two random Llama checkpoints with head_dim 64 and 128 (attention on tensor cores, K and
// N of several chunks, a partial last chunk of K) and the block-quantized GGUF and MLX fixtures.
// Without the option the default kernels are not invariant (one-row kernel at M = 1, cuBLASLt
// above): a test shows that the fixture can tell.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <random>
#include <vector>

#include "common/micro_model.h"
#include "common/model_runs.h"
#include "common/test_util.h"
#include "cuda_consistency.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr int kPrompt = 13;  // prefilled positions before the positions compared
constexpr int kMaxVerify = 32;

// Where the fixtures are: the golden models, or random Llama checkpoints written once per run.
std::filesystem::path fixture_dir(const std::string& name) {
  if (name.find('/') != std::string::npos) return test::data_dir() / name;  // gguf/..., mlx/...
  if (name.rfind("micro_hd", 0) != 0) return test::golden_models_dir() / name;
  static const test::TempDir root;  // removed at exit
  const int head_dim = std::stoi(name.substr(8));
  const std::filesystem::path dir = root / name;
  if (!std::filesystem::exists(dir / "config.json")) {
    test::MicroModelSpec spec;
    spec.vocab = 1000;
    spec.head_dim = head_dim;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.hidden = 256;
    spec.intermediate = 688;  // not a multiple of 64: a partial last chunk of K
    spec.layers = 2;
    spec.std = 0.05f;
    spec.seed = static_cast<uint32_t>(head_dim);
    test::write_micro_llama(dir, spec);
  }
  return dir;
}

// The bf16 model of `name` on CUDA, eager (a graph replays the eager forward's kernels: see
// graph_forward_test.cpp).
struct Loaded {
  std::unique_ptr<Model> model;
  int64_t vocab = 0;
};
Loaded load(const std::string& name) {
  Loaded l;
  l.model = load_model(fixture_dir(name), Device::cuda(0), DType::bf16);
  l.model->set_cuda_graphs(false);
  l.vocab = l.model->config().vocab_size;
  return l;
}

// The logits of positions kPrompt .. kPrompt + kMaxVerify - 1 of `text`, decoded one token per
// forward after the prompt's prefill.
std::vector<float> decode_reference(Model& model, Context& ctx, PagedKvCache& kv,
                                    const std::vector<int32_t>& text) {
  const std::vector<int32_t> prompt(text.begin(), text.begin() + kPrompt);
  const SeqId ref = kv.create_sequence();
  test::forward_row_logits(model, ctx, kv, {{ref, prompt}}, 0);
  std::vector<float> decoded;
  for (int j = 0; j < kMaxVerify; ++j) {
    const std::vector<float> l = test::forward_row_logits(
        model, ctx, kv, {{ref, {text[static_cast<size_t>(kPrompt + j)]}}}, 0);
    decoded.insert(decoded.end(), l.begin(), l.end());
  }
  kv.release(ref);
  return decoded;
}

// The number of positions of a verify of k (with the rows `others` adds around it) whose logits
// differ from their decode, and a description of the first.
struct Verified {
  int differing = 0;
  std::string first;
};
template <typename Others>
Verified verify_against(Model& model, Context& ctx, PagedKvCache& kv,
                        const std::vector<int32_t>& text, const std::vector<float>& decoded, int k,
                        Others others) {
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt(text.begin(), text.begin() + kPrompt);
  const SeqId seq = kv.create_sequence();
  test::forward_row_logits(model, ctx, kv, {{seq, prompt}}, 0);
  test::ForwardRows rows;
  std::vector<SeqId> extra;
  auto other = [&](int prefilled, int n, uint32_t seed) {
    const SeqId s = kv.create_sequence();
    extra.push_back(s);
    const std::vector<int32_t> t = test::random_token_ids(vocab, prefilled + n, seed);
    test::forward_row_logits(model, ctx, kv, {{s, {t.begin(), t.begin() + prefilled}}}, 0);
    rows.push_back({s, {t.begin() + prefilled, t.end()}});
  };
  const size_t wanted = others(other, rows, [&] {
    rows.push_back({seq, {text.begin() + kPrompt, text.begin() + kPrompt + k}});
  });
  const std::vector<float> got = test::forward_row_logits(model, ctx, kv, rows, wanted);
  Verified v;
  for (int j = 0; j < k; ++j) {
    const size_t at = static_cast<size_t>(j) * static_cast<size_t>(vocab);
    if (std::memcmp(got.data() + at, decoded.data() + at, static_cast<size_t>(vocab) * 4) == 0)
      continue;
    if (v.differing++ == 0) v.first = "position " + std::to_string(j);
  }
  kv.release(seq);
  for (SeqId s : extra) kv.release(s);
  return v;
}

class BatchInvarianceCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchInvarianceCuda, VerifyRowsEqualDecodeRowsBitwise) {
  DSPARK_REQUIRE_CUDA();
  Context ctx(Device::cuda(0));
  ctx.cuda_tuning().batch_invariant = true;
  Loaded l = load(GetParam());
  Model& model = *l.model;
  PagedKvCache kv(model.kv_shape(16, 256), Device::cuda(0));
  const std::vector<int32_t> text = test::random_token_ids(l.vocab, kPrompt + kMaxVerify, 7);
  const std::vector<float> decoded = decode_reference(model, ctx, kv, text);

  for (int k = 1; k <= kMaxVerify; ++k) {
    // Alone.
    Verified v = verify_against(model, ctx, kv, text, decoded, k,
                                [](auto&, test::ForwardRows& rows, auto me) {
                                  me();
                                  return rows.size() - 1;
                                });
    EXPECT_EQ(v.differing, 0) << GetParam() << ": verify of " << k << ", " << v.first
                              << " differs from its decode";
    if (k % 4 != 1 && k != kMaxVerify) continue;  // k = 1, 5, 9, ..., 29, 32 with other rows
    // A decode row before it, a verify of 5 drafts and a prefill chunk after it.
    v = verify_against(model, ctx, kv, text, decoded, k,
                       [](auto& other, test::ForwardRows& rows, auto me) {
                         other(21, 1, 11);
                         me();
                         const size_t at = rows.size() - 1;
                         other(5, 6, 12);
                         other(1, 20, 13);
                         return at;
                       });
    EXPECT_EQ(v.differing, 0) << GetParam() << ": verify of " << k << " between other rows, "
                              << v.first << " differs from its decode";
    // 31 other requests' decode rows, the row 17th.
    v = verify_against(model, ctx, kv, text, decoded, k,
                       [](auto& other, test::ForwardRows& rows, auto me) {
                         size_t at = 0;
                         for (int r = 0; r < 32; ++r) {
                           if (r == 16) {
                             me();
                             at = rows.size() - 1;
                           } else {
                             other(3 + r, 1, 100 + static_cast<uint32_t>(r));
                           }
                         }
                         return at;
                       });
    EXPECT_EQ(v.differing, 0) << GetParam() << ": verify of " << k << " among 32 requests, "
                              << v.first << " differs from its decode";
  }
}

// The default kernels (not invariant) on the fixture with tensor-core attention: some verify
// position differs from its decode, so the test above can tell invariant kernels from others.
TEST(BatchInvarianceCudaDefault, SomeVerifyRowDiffersWithoutTheOption) {
  DSPARK_REQUIRE_CUDA();
  Context ctx(Device::cuda(0));
  ASSERT_FALSE(ctx.cuda_tuning().batch_invariant);
  Loaded l = load("micro_hd128");
  PagedKvCache kv(l.model->kv_shape(16, 256), Device::cuda(0));
  const std::vector<int32_t> text = test::random_token_ids(l.vocab, kPrompt + kMaxVerify, 7);
  const std::vector<float> decoded = decode_reference(*l.model, ctx, kv, text);
  int differing = 0;
  for (int k : {8, 17, 32})
    differing += verify_against(*l.model, ctx, kv, text, decoded, k,
                                [](auto&, test::ForwardRows& rows, auto me) {
                                  me();
                                  return rows.size() - 1;
                                })
                     .differing;
  EXPECT_GT(differing, 0) << "the default kernels gave every verify row its decode's bits";
}

std::vector<std::string> fixtures() {
  return {"llama3", "qwen2", "qwen3", "qwen3_yarn", "mistral", "micro_hd64", "micro_hd128",
          "qwen3_moe", "deepseek_v3", "deepseek_v3_q_proj", "glm4_moe",
          // DeepSeek sparse attention (index_topk 6 < the prompt): per-query kernels, unchanged.
          "glm_moe_dsa",
          // Block-quantized weights (the few-row kernel at every M, in chunks of 4 rows; the
          // dequantized blocks and the invariant dense kernel where K is not a multiple of 256)
          // and F16.
          "gguf/tiny_llama_quant.gguf", "gguf/tiny_llama_k.gguf", "gguf/tiny_qwen3_moe.gguf",
          "mlx/llama3_q4_g64", "mlx/llama3_q8_g64"};
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvarianceCuda, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace dspark
