// Per-position confidence thresholds for DSpark proposal pruning (the simple released form of
// confidence scheduling): from logged (position, confidence, accepted) observations of unpruned
// proposals, pick for every draft position k > 0 the smallest threshold t such that the drafts
// kept by "confidence >= t" are accepted with smoothed precision >= the target:
//
//   precision(t) = (A_t + 1) / (N_t + 2)     (Laplace smoothing; N_t observations at position k
//                                             with confidence >= t, A_t of them accepted)
//
// Observations are the positions the verifier REACHED (all earlier drafts accepted), so the
// precision is the acceptance probability of draft k given that it is verified at all.
//   - position 0 is never pruned (threshold 0);
//   - thin evidence (fewer than min_samples observations at k) -> no pruning (0);
//   - precision(0) >= target -> 0; otherwise the smallest observed confidence t whose kept set
//     still has at least min_kept observations and reaches the target;
//   - no such t -> 1 (prune the position unless its confidence is exactly 1).
// Pure functions; the thresholds file is JSON (dspark_thresholds.json next to the checkpoint).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dspark {

// One observation: a drafted position the verifier reached, and whether it was accepted.
struct ConfidenceSample {
  int position = 0;
  float confidence = 0;
  bool accepted = false;
};

struct ThresholdFitOptions {
  double target_precision = 0.5;
  int64_t min_samples = 64;  // observations a position needs before it may be pruned
  int64_t min_kept = 16;     // observations a candidate threshold must keep
};

struct PositionFit {
  int position = 0;
  int64_t n_samples = 0;
  int64_t n_accepted = 0;
  float threshold = 0;
  int64_t n_kept = 0;    // observations with confidence >= threshold
  double precision = 0;  // smoothed precision of the kept observations
  std::string reason;    // "position 0", "thin evidence", "fits", "target met", "never met"
};

struct ThresholdFit {
  std::vector<float> thresholds;  // [n_positions]
  std::vector<PositionFit> positions;
};

// Fits thresholds for positions 0..n_positions-1 (observations at other positions are ignored).
ThresholdFit fit_thresholds(std::span<const ConfidenceSample> samples, int n_positions,
                            const ThresholdFitOptions& options);

// The smoothed precision (A + 1) / (N + 2).
double smoothed_precision(int64_t n_accepted, int64_t n);

// One draft position's calibrated acceptance: the probability that a draft is accepted, given its
// confidence and that every draft before it in the round was accepted. Knots of non-decreasing
// confidence and probability; linear between them, constant beyond the ends. The adaptive draft
// policy cuts each round's proposal with it (engine/speculative.h).
struct AcceptanceCurve {
  std::vector<float> confidence;
  std::vector<float> probability;
  bool empty() const { return confidence.empty(); }
  float at(float c) const;
};

struct AcceptanceFitOptions {
  int64_t min_samples = 64;   // observations a position needs for a curve (else it has none)
  int64_t bin_samples = 256;  // observations per bin at least (bins of equal count)
  int max_bins = 16;
};

// Per position 0..n_positions-1: observations sorted by confidence, cut into bins of equal count,
// each bin a knot (mean confidence, smoothed acceptance (A + 1) / (N + 2)); adjacent bins whose
// acceptance decreases are pooled (isotonic regression, weighted by count), so the curve never
// falls as confidence rises. A position with fewer than min_samples observations gets no curve.
std::vector<AcceptanceCurve> fit_acceptance_curves(std::span<const ConfidenceSample> samples,
                                                   int n_positions,
                                                   const AcceptanceFitOptions& options);

struct ThresholdsFile {
  std::vector<float> thresholds;  // per draft position, each in [0, 1]
  double target_precision = 0;
  int block_size = 0;
  int64_t n_samples = 0;
  std::vector<PositionFit> positions;  // written for inspection; not needed to read
  // Per draft position (optional: files without "acceptance" have none; a position may be empty).
  std::vector<AcceptanceCurve> acceptance;
};

// Reads a thresholds file: {"format": "dspark-thresholds/1", "thresholds": [...], ...,
// "acceptance": [{"position": k, "confidence": [...], "probability": [...]}, ...] (optional)}.
// Throws io naming the file and the problem.
ThresholdsFile read_thresholds_file(const std::filesystem::path& file);
void write_thresholds_file(const std::filesystem::path& file, const ThresholdsFile& contents);
// One position's fit as the thresholds file and `dspark calibrate --json` write it.
nlohmann::json position_fit_json(const PositionFit& fit);
// One position's acceptance curve as the thresholds file and `dspark calibrate --json` write it:
// {"position", "confidence", "probability"}.
nlohmann::json acceptance_curve_json(int position, const AcceptanceCurve& curve);

}  // namespace dspark
