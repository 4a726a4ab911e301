#include "common/model_runs.h"

#include "dspark/core/buffer.h"
#include "dspark/kv/paged_kv_cache.h"

namespace dspark::test {

std::vector<int32_t> fixed_prompt(int vocab, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < 9; ++i) p.push_back((7 + 31 * i + 13 * salt) % vocab);
  return p;
}

GenerateOptions greedy_tokens(int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.eos_token_ids = {};
  return o;
}

std::vector<float> last_position_logits(Model& m, Context& ctx,
                                        const std::vector<int32_t>& prompt) {
  PagedKvCache kv(m.kv_shape(16, 8), ctx.device());
  const SeqId seq = kv.create_sequence();
  ForwardBatch b;
  b.tokens = prompt;
  b.row_indptr = {0, static_cast<int32_t>(prompt.size())};
  b.seqs = {seq};
  b.logit_indices = {static_cast<int32_t>(prompt.size()) - 1};
  const Tensor logits = m.forward(ctx, kv, b).logits;
  ctx.synchronize();
  return to_f32_vector(logits);
}

}  // namespace dspark::test
