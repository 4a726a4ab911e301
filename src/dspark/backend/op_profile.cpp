#include "dspark/backend/op_profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "dspark/backend/cuda/runtime.h"

namespace dspark {
namespace {

struct Record {
  const char* call;
  std::unique_ptr<cuda::Event> start, end;
};

std::atomic<bool> g_enabled{false};
std::mutex g_mutex;
uint64_t g_generation = 0;  // bumped by take_op_profile: a scope open across it records nothing
std::vector<Record>& records() {
  static std::vector<Record> r;
  return r;
}

// "cuda::linear(ctx, x, ...)" -> "linear".
std::string op_name(const char* call) {
  std::string s(call);
  s = s.substr(0, s.find('('));
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

}  // namespace

void set_op_profiling(bool enabled) {
  g_enabled.store(enabled);
}

bool op_profiling_enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

std::vector<OpTime> take_op_profile() {
  std::vector<Record> taken;
  {
    std::lock_guard lock(g_mutex);
    taken.swap(records());
    ++g_generation;
  }
  std::map<std::string, OpTime> by_op;
  for (const Record& r : taken) {
    if (!r.end) continue;  // a launch that threw before its end was recorded
    r.end->synchronize();
    OpTime& t = by_op[op_name(r.call)];
    t.calls += 1;
    t.ms += static_cast<double>(r.end->elapsed_ms_since(*r.start));
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_op) {
    t.op = name;
    out.push_back(t);
  }
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

OpProfileScope::OpProfileScope(const Context& ctx, const char* call) {
  if (!op_profiling_enabled() || !ctx.is_cuda() || ctx.capturing()) return;
  Record r{call, std::make_unique<cuda::Event>(), nullptr};
  r.start->record(ctx.stream());
  ctx_ = &ctx;
  std::lock_guard lock(g_mutex);
  index_ = static_cast<int64_t>(records().size());
  generation_ = g_generation;
  records().push_back(std::move(r));
}

OpProfileScope::~OpProfileScope() {
  if (index_ < 0) return;
  auto end = std::make_unique<cuda::Event>();
  end->record(ctx_->stream());
  std::lock_guard lock(g_mutex);
  if (generation_ == g_generation) records()[static_cast<size_t>(index_)].end = std::move(end);
}

}  // namespace dspark
