// Device time per op, for finding where a forward's time goes (bench_round --profile-ops). When
// enabled, ops/ bracket every CUDA launch with two events on the context's stream (eager launches
// only: nothing is recorded while a CUDA graph is being captured, nor on CPU contexts);
// take_op_profile() waits for them and sums the elapsed time per op. When the host runs ahead of
// the GPU (the usual case for a decode step), an op's time is its kernels' device time plus the
// gaps between them. Off by default; its cost when off is one atomic load per op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspark/backend/context.h"

namespace dspark {

void set_op_profiling(bool enabled);
bool op_profiling_enabled();

struct OpTime {
  std::string op;  // the launcher's name, e.g. "linear", "paged_attention"
  int64_t calls = 0;
  double ms = 0;  // total device milliseconds
};
// Waits for every recorded launch, returns the totals per op (largest first) and clears them.
std::vector<OpTime> take_op_profile();

// Brackets one launch (constructed before, destroyed after it). `call` is the launcher call's
// source text (static storage): its name is the part before '('.
class OpProfileScope {
 public:
  OpProfileScope(const Context& ctx, const char* call);
  ~OpProfileScope();
  OpProfileScope(const OpProfileScope&) = delete;
  OpProfileScope& operator=(const OpProfileScope&) = delete;

 private:
  const Context* ctx_ = nullptr;
  int64_t index_ = -1;
  uint64_t generation_ = 0;
};

}  // namespace dspark
