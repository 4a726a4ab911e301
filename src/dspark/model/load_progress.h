// Progress of a model load on stderr. Loading a multi-gigabyte checkpoint takes seconds to
// minutes (reading the file, converting and laying out the weights, copying them to the device);
// a load that has run for kQuietSeconds starts a progress bar (core/progress_bar.h) over the
// checkpoint's bytes, so short loads (small models, tests) stay silent.
//
// create_model (model/registry.h) holds one for its load; WeightLoader (model/layers.h) reports
// each weight it has loaded to the one active on its thread (weights shared by two loaders, or the
// tied embedding and LM head, count twice: the bar stops at 99% until the load ends).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "dspark/core/progress_bar.h"

namespace dspark {

class LoadProgress {
 public:
  static constexpr double kQuietSeconds = 2.0;

  // Active on this thread until destroyed (the previous one, if any, again after that).
  // `total_bytes`: the checkpoint's (WeightSource::total_stored_bytes); 0 shows nothing.
  LoadProgress(int64_t total_bytes, std::FILE* out = stderr, double quiet_seconds = kQuietSeconds);
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

  // `bytes` more of the checkpoint loaded.
  void add(int64_t bytes);
  // The load finished: a bar that was shown is completed at 100% with the total time.
  void finish();

  int64_t done() const { return done_; }  // bytes added so far

  // add() on this thread's active progress, if any.
  static void add_to_active(int64_t bytes);
  static bool active();

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  int64_t done_ = 0;
  double quiet_s_;
  Clock::time_point start_ = Clock::now();
  std::optional<ProgressBar> bar_;
  std::FILE* out_;
  double drawn_s_ = 0;
  bool finished_ = false;
  LoadProgress* previous_;
};

}  // namespace dspark
