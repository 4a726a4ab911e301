// Batch invariance of the target forward on the CPU: the logits of a row's positions in a verify
// of k tokens equal, bit for bit, those of the same positions decoded one token at a time, for
// k = 1 .. 32, alone and with other requests' rows before and after it in the same forward (a
// decode row, another verify, a prefill chunk). This is what keeps greedy speculative output
// equal to plain greedy output whatever the batch: a near-tie cannot flip between the two.
// Block-quantized weights (the integer products of ops/matmul.h) hold it for any forward; float
// weights hold it while a forward has at most 32 tokens (the small-M kernel; larger forwards go
// through OpenBLAS, in another summation order), so their cases with other rows stop there.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <random>
#include <vector>

#include "common/model_runs.h"
#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr int kPrompt = 13;  // prefilled positions before the positions compared
constexpr int kMaxVerify = 32;
constexpr int kSmallForward = 32;  // tokens of a forward that float weights keep invariant

struct Fixture {
  std::string path;  // under tests/data
  bool any_size;     // invariant for forwards of any size (block weights), else up to 32 tokens
};

class BatchInvarianceCpu : public ::testing::TestWithParam<Fixture> {};

TEST_P(BatchInvarianceCpu, VerifyRowsEqualDecodeRowsBitwise) {
  const std::filesystem::path dir = test::data_dir() / GetParam().path;
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixture " << dir;
  Context ctx(Device::cpu());
  auto model = load_model(dir, Device::cpu(), DType::f32);
  const int64_t vocab = model->config().vocab_size;
  const std::vector<int32_t> text = test::random_token_ids(vocab, kPrompt + kMaxVerify, 7);
  const std::vector<int32_t> prompt(text.begin(), text.begin() + kPrompt);
  PagedKvCache kv(model->kv_shape(16, 64), Device::cpu());

  // The reference: the prompt, then one token per forward.
  const SeqId ref = kv.create_sequence();
  test::forward_row_logits(*model, ctx, kv, {{ref, prompt}}, 0);
  std::vector<float> decoded;
  for (int j = 0; j < kMaxVerify; ++j) {
    const std::vector<float> l = test::forward_row_logits(
        *model, ctx, kv, {{ref, {text[static_cast<size_t>(kPrompt + j)]}}}, 0);
    decoded.insert(decoded.end(), l.begin(), l.end());
  }
  kv.release(ref);

  for (int k = 1; k <= kMaxVerify; ++k) {
    for (bool others : {false, true}) {
      if (others && k % 4 != 1 && k != kMaxVerify) continue;  // k = 1, 5, 9, ..., 29, 32
      if (others && !GetParam().any_size && 1 + k + 6 + 20 > kSmallForward) continue;
      const SeqId seq = kv.create_sequence();
      test::forward_row_logits(*model, ctx, kv, {{seq, prompt}}, 0);
      test::ForwardRows rows;
      std::vector<SeqId> extra;
      auto other = [&](int prefilled, int n, uint32_t seed) {
        const SeqId s = kv.create_sequence();
        extra.push_back(s);
        const std::vector<int32_t> t = test::random_token_ids(vocab, prefilled + n, seed);
        test::forward_row_logits(*model, ctx, kv, {{s, {t.begin(), t.begin() + prefilled}}}, 0);
        rows.push_back({s, {t.begin() + prefilled, t.end()}});
      };
      if (others) other(21, 1, 11);  // a decode row before it
      rows.push_back({seq, {text.begin() + kPrompt, text.begin() + kPrompt + k}});
      const size_t wanted = rows.size() - 1;
      if (others) {
        other(5, 6, 12);   // a verify of 5 drafts after it
        other(1, 20, 13);  // and a prefill chunk
      }
      const std::vector<float> got = test::forward_row_logits(*model, ctx, kv, rows, wanted);
      ASSERT_EQ(got.size(), static_cast<size_t>(k * vocab));
      for (int j = 0; j < k; ++j) {
        const float* want = decoded.data() + static_cast<size_t>(j * vocab);
        EXPECT_EQ(std::memcmp(got.data() + static_cast<size_t>(j * vocab), want,
                              static_cast<size_t>(vocab) * sizeof(float)),
                  0)
            << GetParam().path << ": position " << j << " of a verify of " << k
            << (others ? " with other rows" : "") << " differs from its decode";
      }
      kv.release(seq);
      for (SeqId s : extra) kv.release(s);
    }
  }
}

std::vector<Fixture> fixtures() {
  std::vector<Fixture> out;
  for (const std::string& m : test::golden_model_names()) out.push_back({"models/" + m, false});
  out.push_back({"gguf/tiny_qwen3_moe.gguf", false});  // F16 weights
  out.push_back({"gguf/tiny_llama_quant.gguf", true});
  out.push_back({"gguf/tiny_llama_k.gguf", true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvarianceCpu, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<Fixture>& param) {
                           std::string name = param.param.path;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace dspark
