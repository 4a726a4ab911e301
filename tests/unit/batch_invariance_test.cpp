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

#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr int kPrompt = 13;  // prefilled positions before the positions compared
constexpr int kMaxVerify = 32;
constexpr int kSmallForward = 32;  // tokens of a forward that float weights keep invariant

std::vector<int32_t> random_tokens(int64_t vocab, int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = tok(gen);
  return out;
}

// One forward of `rows` (sequence, tokens), the logits of every token of row `wanted`.
std::vector<float> forward_rows(Model& model, Context& ctx, PagedKvCache& kv,
                                const std::vector<std::pair<SeqId, std::vector<int32_t>>>& rows,
                                size_t wanted) {
  ForwardBatch b;
  b.row_indptr.push_back(0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int first = static_cast<int>(b.tokens.size());
    b.tokens.insert(b.tokens.end(), rows[r].second.begin(), rows[r].second.end());
    b.row_indptr.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seqs.push_back(rows[r].first);
    if (r == wanted)
      for (int i = first; i < static_cast<int>(b.tokens.size()); ++i) b.logit_indices.push_back(i);
  }
  return to_f32_vector(model.forward(ctx, kv, b).logits);
}

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
  const std::vector<int32_t> text = random_tokens(vocab, kPrompt + kMaxVerify, 7);
  const std::vector<int32_t> prompt(text.begin(), text.begin() + kPrompt);
  PagedKvCache kv(model->kv_shape(16, 64), Device::cpu());

  // The reference: the prompt, then one token per forward.
  const SeqId ref = kv.create_sequence();
  forward_rows(*model, ctx, kv, {{ref, prompt}}, 0);
  std::vector<float> decoded;
  for (int j = 0; j < kMaxVerify; ++j) {
    const std::vector<float> l =
        forward_rows(*model, ctx, kv, {{ref, {text[static_cast<size_t>(kPrompt + j)]}}}, 0);
    decoded.insert(decoded.end(), l.begin(), l.end());
  }
  kv.release(ref);

  for (int k = 1; k <= kMaxVerify; ++k) {
    for (bool others : {false, true}) {
      if (others && k % 4 != 1 && k != kMaxVerify) continue;  // k = 1, 5, 9, ..., 29, 32
      if (others && !GetParam().any_size && 1 + k + 6 + 20 > kSmallForward) continue;
      const SeqId seq = kv.create_sequence();
      forward_rows(*model, ctx, kv, {{seq, prompt}}, 0);
      std::vector<std::pair<SeqId, std::vector<int32_t>>> rows;
      std::vector<SeqId> extra;
      auto other = [&](int prefilled, int n, uint32_t seed) {
        const SeqId s = kv.create_sequence();
        extra.push_back(s);
        const std::vector<int32_t> t = random_tokens(vocab, prefilled + n, seed);
        forward_rows(*model, ctx, kv, {{s, {t.begin(), t.begin() + prefilled}}}, 0);
        rows.push_back({s, {t.begin() + prefilled, t.end()}});
      };
      if (others) other(21, 1, 11);  // a decode row before it
      rows.push_back({seq, {text.begin() + kPrompt, text.begin() + kPrompt + k}});
      const size_t wanted = rows.size() - 1;
      if (others) {
        other(5, 6, 12);   // a verify of 5 drafts after it
        other(1, 20, 13);  // and a prefill chunk
      }
      const std::vector<float> got = forward_rows(*model, ctx, kv, rows, wanted);
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
