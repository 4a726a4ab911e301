// The lossless verifier: one pure function of (target logits, drafts, draft distributions,
// sampling parameters, seeds, positions) -> (accepted count, next token) per request, on the CPU
// or CUDA. Greedy requests accept the longest prefix of drafts equal to the target's argmax and
// then emit the target's own argmax; sampled requests use coupled or rejection speculative
// sampling (SamplingParams::spec, ops/speculative.h), so emitted tokens are distributed exactly as
// the target's (coupled: they are the tokens plain sampling with the same seed emits).
// The Verifier object only caches device workspace and host staging between calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/pinned_memory.h"
#include "dspark/core/buffer.h"
#include "dspark/spec/draft_source.h"

namespace dspark {

struct VerifyResult {
  std::vector<int32_t> n_accepted;  // per request
  std::vector<int32_t> next_token;  // per request: the target's token after the accepted prefix
};

class Verifier {
 public:
  // target_logits: f32 [sum over requests of (k_i + 1), vocab] on ctx's device, request i's rows
  //   in order ([pending, d_1..d_k] -> k_i + 1 rows);
  // proposal: the drafts (k_i = proposal.count(i)) and optional q;
  // params / seeds: per request; positions: per request, the sequence position of draft 1 (the
  //   position right after the pending token).
  VerifyResult verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                      std::span<const SamplingParams> params, std::span<const uint64_t> seeds,
                      std::span<const int32_t> positions);
  // The same into `out`, whose vectors keep their storage from call to call (the engine's rounds).
  // target_argmax (optional): the argmax of each target_logits row in host memory, as the target's
  // forward copied it (ForwardOutput::argmax; valid once ctx has synchronised): a greedy verify
  // then only waits for the device, with no launch or copy of its own.
  void verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
              std::span<const SamplingParams> params, std::span<const uint64_t> seeds,
              std::span<const int32_t> positions, VerifyResult& out,
              const int32_t* target_argmax = nullptr);

  // Whether verify takes the greedy path for these requests (no draft probabilities, every row
  // greedy): then a target_argmax is used.
  static bool is_greedy(const Proposal& proposal, std::span<const SamplingParams> params);

  // Allocates the host staging of the readback ahead (pinned on CUDA: enough for 2,048 logits
  // rows), so that the first verify does not pay for it. Optional.
  void prepare(Context& ctx);

  // For SpecConfig::cpu_times: with the clock on, every verify reads this thread's CPU clock once,
  // after enqueueing its device work and its one readback and before waiting for them
  // (enqueued_cpu_ms; 0 when it enqueued nothing), and times that wait (wait_ms, wall). Off: no
  // clock reads.
  void set_cpu_clock(bool on) { cpu_clock_ = on; }
  double enqueued_cpu_ms() const { return enqueued_cpu_ms_; }
  double wait_ms() const { return wait_ms_; }

 private:
  void verify_greedy(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                     VerifyResult& out, const int32_t* target_argmax);
  // Enqueues the copy of `t` (i32, contiguous, on ctx's device) to host staging, waits for it and
  // returns the host values (valid until the next verify). On the CPU: t's own data, no copy.
  const int32_t* read_back(Context& ctx, const Tensor& t);
  // The round's one wait for the device (with the clock on: enqueued_cpu_ms and wait_ms).
  void wait_for_device(Context& ctx);

  // Grow-only host memory for the uploads and the readback (8-byte aligned): pinned on CUDA, so
  // that copies to and from it are plain DMA on the context's stream (no driver bounce buffer; a
  // device->host copy to pageable memory also waits inside the copy call); plain on the CPU.
  struct HostStaging {
    PinnedBuffer pinned;
    std::vector<uint64_t> plain;
    void* get(Device device, size_t bytes);
  };

  OwnedTensor probs_;   // f32 [rows, vocab]
  OwnedTensor packed_;  // i32 staging for the index inputs and outputs
  OwnedTensor seeds_;   // i64 [n]
  HostStaging upload_, read_;
  bool upload_in_flight_ = false;  // a copy from upload_ may not have run yet
  std::vector<SamplingParams> row_params_;
  bool cpu_clock_ = false;
  double enqueued_cpu_ms_ = 0, wait_ms_ = 0;
};

}  // namespace dspark
