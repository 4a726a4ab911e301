#include "dspark/spec/verifier.h"

#include <algorithm>
#include <chrono>

#include "dspark/core/thread_cpu_time.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/softmax.h"
#include "dspark/ops/speculative.h"

namespace dspark {
namespace {

// Grows `t` (contents discarded) so it holds at least `numel` elements of `dtype`.
Tensor ensure_elements(OwnedTensor& t, DType dtype, int64_t numel, Device device) {
  if (!t.view().defined() || t.view().numel() < numel || t.device() != device) {
    t = OwnedTensor(dtype, Shape{std::max<int64_t>(numel, 64)}, device);
  }
  return t.view().slice(0, 0, numel);
}

}  // namespace

void* Verifier::HostStaging::get(Device device, size_t bytes) {
  bytes = std::max<size_t>(bytes, 8);
  if (device.is_cuda()) {
    // Callers make sure no copy from / to the old buffer is still queued.
    if (pinned.bytes() < bytes) pinned = PinnedBuffer(std::max<size_t>(2 * bytes, 4096));
    return pinned.data();
  }
  if (plain.size() * sizeof(uint64_t) < bytes) plain.resize((bytes + 7) / 8);
  return plain.data();
}

void Verifier::prepare(Context& ctx) {
  if (ctx.is_cuda()) (void)read_.get(ctx.device(), 2048 * sizeof(int32_t));
}

VerifyResult Verifier::verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                              std::span<const SamplingParams> params,
                              std::span<const uint64_t> seeds, std::span<const int32_t> positions) {
  VerifyResult r;
  verify(ctx, target_logits, proposal, params, seeds, positions, r);
  return r;
}

bool Verifier::is_greedy(const Proposal& proposal, std::span<const SamplingParams> params) {
  if (proposal.q.defined()) return false;
  return std::all_of(params.begin(), params.end(),
                     [](const SamplingParams& p) { return p.greedy(); });
}

const int32_t* Verifier::read_back(Context& ctx, const Tensor& t) {
  const int32_t* host = static_cast<const int32_t*>(t.data());
  if (ctx.is_cuda()) {
    auto* staging = static_cast<int32_t*>(read_.get(ctx.device(), t.nbytes()));
    ctx.copy_async(staging, t.data(), t.nbytes());
    host = staging;
  }
  wait_for_device(ctx);
  return host;
}

void Verifier::wait_for_device(Context& ctx) {
  using Clock = std::chrono::steady_clock;
  const bool cuda = ctx.is_cuda();
  Clock::time_point wait_start;
  if (cpu_clock_) {
    enqueued_cpu_ms_ = thread_cpu_ms();
    wait_start = Clock::now();
  }
  if (cuda) ctx.synchronize();  // the round's one wait for the device
  upload_in_flight_ = false;
  if (cpu_clock_)
    wait_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - wait_start).count();
}

void Verifier::verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                      std::span<const SamplingParams> params, std::span<const uint64_t> seeds,
                      std::span<const int32_t> positions, VerifyResult& r,
                      const int32_t* target_argmax) {
  const int64_t n = static_cast<int64_t>(proposal.indptr.size()) - 1;
  DSPARK_CHECK(n >= 0 && static_cast<int64_t>(params.size()) == n &&
                   static_cast<int64_t>(seeds.size()) == n &&
                   static_cast<int64_t>(positions.size()) == n,
               "verify: {} requests but {} params, {} seeds, {} positions", n, params.size(),
               seeds.size(), positions.size());
  const int64_t n_drafts = static_cast<int64_t>(proposal.tokens.size());
  DSPARK_CHECK(proposal.indptr.back() == n_drafts, "verify: proposal indptr/tokens mismatch");
  DSPARK_CHECK(target_logits.dim() == 2 && target_logits.size(0) == n_drafts + n,
               "verify: {} logits rows for {} drafts in {} requests",
               target_logits.dim() == 2 ? target_logits.size(0) : -1, n_drafts, n);
  r.n_accepted.clear();
  r.next_token.clear();
  enqueued_cpu_ms_ = 0;  // set by read_back (with the clock on)
  wait_ms_ = 0;
  if (n == 0) return;

  if (is_greedy(proposal, params)) {
    verify_greedy(ctx, target_logits, proposal, r, target_argmax);
    return;
  }

  const Device device = ctx.device();
  const int64_t vocab = target_logits.size(1);
  const int64_t rows = n_drafts + n;

  // p: each logits row processed with its request's parameters.
  row_params_.assign(static_cast<size_t>(rows), SamplingParams{});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = proposal.indptr[i] + i; j <= proposal.indptr[i + 1] + i; ++j)
      row_params_[static_cast<size_t>(j)] = params[static_cast<size_t>(i)];
  Tensor p = ensure_elements(probs_, DType::f32, rows * vocab, device).reshape(Shape{rows, vocab});
  process_logits(ctx, target_logits, row_params_, p);

  // One packed upload: [tokens | indptr | positions | modes | n_accepted | next_token], and the
  // seeds, from host staging (8-byte aligned after the i32 part).
  const int64_t n_index = n_drafts + 3 * n + 1;
  const size_t seeds_at = (static_cast<size_t>(n_index) * sizeof(int32_t) + 7) / 8 * 8;
  if (upload_in_flight_) ctx.synchronize();  // a failed verify left its upload queued
  auto* staging = static_cast<char*>(upload_.get(device, seeds_at + seeds.size_bytes()));
  auto* host = reinterpret_cast<int32_t*>(staging);
  // (std::copy: a round without drafts has empty, possibly null, sources.)
  std::copy(proposal.tokens.begin(), proposal.tokens.begin() + n_drafts, host);
  std::copy(proposal.indptr.begin(), proposal.indptr.begin() + n + 1, host + n_drafts);
  std::copy(positions.begin(), positions.end(), host + n_drafts + n + 1);
  for (int64_t i = 0; i < n; ++i)
    host[n_drafts + 2 * n + 1 + i] = static_cast<int32_t>(params[static_cast<size_t>(i)].spec);
  std::copy(seeds.begin(), seeds.end(), reinterpret_cast<uint64_t*>(staging + seeds_at));
  Tensor packed = ensure_elements(packed_, DType::i32, n_index + 2 * n, device);
  ctx.copy_async(packed.data(), host, static_cast<size_t>(n_index) * sizeof(int32_t));
  Tensor seed_t = ensure_elements(seeds_, DType::i64, n, device);
  ctx.copy_async(seed_t.data(), staging + seeds_at, seeds.size_bytes());
  upload_in_flight_ = device.is_cuda();

  int64_t at = 0;
  auto take = [&](int64_t count) {
    Tensor t = packed.slice(0, at, at + count);
    at += count;
    return t;
  };
  Tensor tokens = take(n_drafts);
  Tensor indptr = take(n + 1);
  Tensor pos = take(n);
  Tensor modes = take(n);
  Tensor out = take(2 * n);
  speculative_accept(ctx, p, proposal.q, tokens, indptr, seed_t, pos, modes, out.slice(0, 0, n),
                     out.slice(0, n, 2 * n));
  const int32_t* result = read_back(ctx, out);  // the round's one device read
  r.n_accepted.assign(result, result + n);
  r.next_token.assign(result + n, result + 2 * n);
}

void Verifier::verify_greedy(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                             VerifyResult& r, const int32_t* target_argmax) {
  const int64_t n = static_cast<int64_t>(proposal.indptr.size()) - 1;
  const int32_t* target = target_argmax;
  if (target != nullptr) {
    wait_for_device(ctx);  // the forward enqueued the argmax and its copy to the host
  } else {
    Tensor best = ensure_elements(packed_, DType::i32, target_logits.size(0), ctx.device());
    argmax(ctx, target_logits, best);
    target = read_back(ctx, best);  // the round's one device read
  }
  r.n_accepted.resize(static_cast<size_t>(n));
  r.next_token.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t d0 = proposal.indptr[i];
    const int32_t k = proposal.indptr[i + 1] - d0;
    const int64_t row0 = d0 + i;  // target row scoring draft 0
    int32_t j = 0;
    while (j < k && proposal.tokens[d0 + j] == target[row0 + j]) ++j;
    r.n_accepted[i] = j;
    r.next_token[i] = target[row0 + j];
  }
}

}  // namespace dspark
