#include "dspark/model/load_progress.h"

#include <algorithm>

#include <fmt/format.h>

namespace dspark {
namespace {

thread_local LoadProgress* t_active = nullptr;

}  // namespace

LoadProgress::LoadProgress(int64_t total_bytes, std::FILE* out, double quiet_seconds)
    : total_(total_bytes), quiet_s_(quiet_seconds), out_(out), previous_(t_active) {
  t_active = this;
}

LoadProgress::~LoadProgress() {
  t_active = previous_;
  if (bar_) bar_->finish();  // a load that failed: end the bar's line before the error
}

void LoadProgress::add(int64_t bytes) {
  if (total_ <= 0 || finished_) return;
  done_ += bytes;
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  if (!bar_ && seconds < quiet_s_) return;
  if (bar_ && seconds - drawn_s_ < 0.1) return;  // a terminal's bar: ten redraws a second at most
  drawn_s_ = seconds;
  if (!bar_) bar_.emplace(out_, "tensors");
  // Counted twice (a tied head, two loaders): never 100% before the end.
  const int64_t shown = std::min(done_, total_ - std::max<int64_t>(1, total_ / 100));
  bar_->update(0, 0, std::max<int64_t>(shown, 0), total_,
               fmt::format("loading, {:.0f} s", seconds));
}

void LoadProgress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!bar_) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  bar_->update(0, 0, total_, total_, fmt::format("loaded in {:.1f} s", seconds));
  bar_->finish();
  bar_.reset();
}

void LoadProgress::add_to_active(int64_t bytes) {
  if (t_active != nullptr) t_active->add(bytes);
}

bool LoadProgress::active() {
  return t_active != nullptr;
}

}  // namespace dspark
