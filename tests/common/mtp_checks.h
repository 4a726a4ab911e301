// Checks of the MTP draft source (spec/mtp_source.h) shared by the CPU and CUDA suites, on the
// tiny MTP fixtures tests/data/models/<family>_mtp (tools/mtp/make_mtp_fixtures.py).
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"
#include "dspark/model/mtp.h"
#include "dspark/spec/mtp_source.h"

namespace dspark::test {

std::filesystem::path mtp_fixture_dir(const std::string& family);  // "deepseek_v3", "glm4_moe"

// One case of a fixture's mtp_goldens.safetensors (the PyTorch reference of
// tools/mtp/make_mtp_fixtures.py): the MTP layer's k chained logits and greedy drafts after
// `context` with the pending token.
struct MtpGolden {
  std::vector<int32_t> context;
  int32_t pending = 0;
  std::vector<float> logits;  // [k, vocab]
  std::vector<int32_t> drafts;
};
std::vector<MtpGolden> load_mtp_goldens(const std::filesystem::path& dir);

// One target forward of `tokens` appended to `seq`: every token's last-layer tap (and final
// hidden state).
ForwardOutput mtp_target_forward(Context& ctx, Model& target, PagedKvCache& kv, SeqId seq,
                                 const std::vector<int32_t>& tokens);
// The MTP layer's rows of g's context on the new sequence `seq` of `kv`: (h_i, t_{i+1}) with
// `hidden` the
// target's final hidden states of the context, the last row with the pending token; logits of
// the last row (the first draft's).
ForwardOutput mtp_context_rows(Context& ctx, MtpLayer& layer, PagedKvCache& kv, SeqId seq,
                               const MtpGolden& g, const Tensor& hidden);
// The source's greedy drafts (up to k) for row 0.
std::vector<int32_t> mtp_propose_greedy(Context& ctx, MtpSource& src, int k);
// q of row 0's first draft at temperature 1 (the softmax of the MTP's logits).
std::vector<float> mtp_first_draft_q(Context& ctx, MtpSource& src);

// The MTP fixture of `family` rewritten as a deterministic bigram chain that its MTP layer
// predicts exactly: every attention output and FFN down projection (target and MTP layer) zero,
// so the target's next token depends only on the current one (lm_head(norm(embed(t)))); eh_proj
// = [I | 0], enorm 1, shared_head.norm / head = the target's final norm / LM head, so the MTP
// layer's logits for t_{i+1} are the target's for it. Written under `out` (created); returns it.
std::filesystem::path write_bigram_mtp_fixture(const std::string& family,
                                               const std::filesystem::path& out);

struct MtpLosslessStats {
  long long drafted = 0, accepted = 0;
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
};

// Greedy speculative decoding with the MTP source (gamma 1, 2, 3, 5; the prompts as one batch,
// prefilled in chunks of 7 tokens) emits exactly the plain greedy tokens; and with coupled
// sampling (T 0.8, top-p 0.9, gamma 3) exactly plain sampling's tokens of the same seed. Returns
// the greedy rounds' draft counts.
MtpLosslessStats check_mtp_lossless(const std::filesystem::path& model_dir, Device device,
                                    DType dtype = DType::f32);

}  // namespace dspark::test
