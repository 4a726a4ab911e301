// Small runs of a loaded model shared by the model tests (the quantized and MLX fixtures, on the
// CPU and on CUDA): fixed prompts, greedy options, the last position's logits.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"
#include "dspark/model/weight_source.h"

namespace dspark::test {

// A weight source with its quantized storage hidden: get_quantized() finds nothing, so a model
// built from it reads every tensor through get() (the source's dequantized f32 values) and holds
// dense weights. The twin of a quantized model in the tests.
class DequantizedView final : public WeightSource {
 public:
  explicit DequantizedView(const WeightSource& w) : w_(w) {}
  bool contains(const std::string& name) const override { return w_.contains(name); }
  Tensor get(const std::string& name) const override { return w_.get(name); }
  std::string origin() const override { return w_.origin(); }

 private:
  const WeightSource& w_;
};

// 9 token ids below `vocab`, a different sequence per salt.
std::vector<int32_t> fixed_prompt(int vocab, int salt);

// n token ids below `vocab`, uniformly random from the seed.
std::vector<int32_t> random_token_ids(int64_t vocab, int n, uint32_t seed);

// One forward of `rows` (sequence, its new tokens) on kv; the logits (as f32) of every token of row
// `wanted`, in order.
using ForwardRows = std::vector<std::pair<SeqId, std::vector<int32_t>>>;
std::vector<float> forward_row_logits(Model& model, Context& ctx, PagedKvCache& kv,
                                      const ForwardRows& rows, size_t wanted);

// Greedy decoding of n tokens that never stops early (no end-of-sequence ids).
GenerateOptions greedy_tokens(int n);

// The last position's logits (as f32) of one forward of `prompt` on ctx's device, with a KV cache
// of its own; synchronises ctx.
std::vector<float> last_position_logits(Model& m, Context& ctx, const std::vector<int32_t>& prompt);

// The greedy tokens (24) of a quantized model against its dequantized twin's (DequantizedView).
// With block weights the products round x to 8 bits (logits within ~1.5% relative RMS of the
// twin's), so a near-tie may break the other way and the two greedy runs part: each token the
// quantized model picks must be the twin's argmax on the same prefix, or trail it by at most 6x
// the RMS difference of the two models' logits there (a broken weight trails by whole logits), and
// at least 90% must be the twin's argmax (of this prompt's tokens; with `share_per_prompt` false
// the caller checks the share over several prompts). Dense weights (`blocks` false): exactly the
// twin's tokens. Returns how many tokens are the twin's argmax.
int expect_twins_greedy_tokens(Model& model, Model& twin, Context& ctx,
                               const std::vector<int32_t>& prompt, bool blocks,
                               bool share_per_prompt = true);

}  // namespace dspark::test
