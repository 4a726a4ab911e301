#include "dspark/spec/dspark/calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"

namespace dspark {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "dspark-thresholds/1";

std::vector<float> read_unit_numbers(const json& entry, const char* key,
                                     const std::string& source) {
  const auto it = entry.find(key);
  DSPARK_CHECK_KIND(io, it != entry.end() && it->is_array(),
                    "{}: an 'acceptance' entry needs '{}' (a list of numbers)", source, key);
  std::vector<float> out;
  for (const json& v : *it) {
    DSPARK_CHECK_KIND(io, v.is_number(), "{}: acceptance '{}' must hold numbers, got {}", source,
                      key, json_brief(v));
    const double x = v.get<double>();
    DSPARK_CHECK_KIND(io, x >= 0.0 && x <= 1.0, "{}: acceptance '{}' value {} is outside [0, 1]",
                      source, key, x);
    DSPARK_CHECK_KIND(io, out.empty() || x >= out.back(),
                      "{}: acceptance '{}' must not decrease ({} after {})", source, key, x,
                      out.back());
    out.push_back(static_cast<float>(x));
  }
  return out;
}

// One "acceptance" entry's knots.
AcceptanceCurve read_curve(const json& entry, const std::string& source) {
  DSPARK_CHECK_KIND(io, entry.is_object(), "{}: an 'acceptance' entry must be an object, got {}",
                    source, json_brief(entry));
  AcceptanceCurve c;
  c.confidence = read_unit_numbers(entry, "confidence", source);
  c.probability = read_unit_numbers(entry, "probability", source);
  DSPARK_CHECK_KIND(io, c.confidence.size() == c.probability.size(),
                    "{}: an 'acceptance' entry has {} confidences but {} probabilities", source,
                    c.confidence.size(), c.probability.size());
  return c;
}

// The finite observations of positions 0..n_positions-1, one list per position.
std::vector<std::vector<ConfidenceSample>> group_by_position(
    std::span<const ConfidenceSample> samples, int n_positions) {
  std::vector<std::vector<ConfidenceSample>> out(static_cast<size_t>(n_positions));
  for (const ConfidenceSample& s : samples) {
    if (s.position < 0 || s.position >= n_positions || !std::isfinite(s.confidence)) continue;
    out[static_cast<size_t>(s.position)].push_back(s);
  }
  return out;
}

PositionFit fit_position(std::vector<ConfidenceSample>& s, int position,
                         const ThresholdFitOptions& o) {
  PositionFit f;
  f.position = position;
  f.n_samples = static_cast<int64_t>(s.size());
  for (const auto& x : s) f.n_accepted += x.accepted ? 1 : 0;
  f.n_kept = f.n_samples;
  f.precision = smoothed_precision(f.n_accepted, f.n_samples);
  if (position == 0) {
    f.reason = "position 0";
    return f;
  }
  if (f.n_samples < o.min_samples) {
    f.reason = "thin evidence";
    return f;
  }
  if (f.precision >= o.target_precision) {
    f.reason = "target met";
    return f;
  }
  // Candidates in increasing order: each distinct confidence t keeps the suffix with c >= t.
  std::sort(s.begin(), s.end(), [](const ConfidenceSample& a, const ConfidenceSample& b) {
    return a.confidence < b.confidence;
  });
  int64_t kept = f.n_samples, accepted = f.n_accepted;
  size_t i = 0;
  while (i < s.size()) {
    const float t = s[i].confidence;
    if (kept < o.min_kept) break;
    const double p = smoothed_precision(accepted, kept);
    if (p >= o.target_precision) {
      f.threshold = t;
      f.n_kept = kept;
      f.precision = p;
      f.reason = "fits";
      return f;
    }
    // Drop every observation with confidence t (they fall below the next candidate).
    while (i < s.size() && s[i].confidence == t) {
      --kept;
      accepted -= s[i].accepted ? 1 : 0;
      ++i;
    }
  }
  f.threshold = 1.0f;
  f.n_kept = 0;
  f.reason = "never met";
  return f;
}

}  // namespace

double smoothed_precision(int64_t n_accepted, int64_t n) {
  return (static_cast<double>(n_accepted) + 1.0) / (static_cast<double>(n) + 2.0);
}

ThresholdFit fit_thresholds(std::span<const ConfidenceSample> samples, int n_positions,
                            const ThresholdFitOptions& options) {
  DSPARK_CHECK_KIND(invalid_input, n_positions >= 0, "fit_thresholds: {} positions", n_positions);
  DSPARK_CHECK_KIND(invalid_input, options.target_precision > 0.0 && options.target_precision < 1.0,
                    "target precision must be in (0, 1), got {}", options.target_precision);
  std::vector<std::vector<ConfidenceSample>> by_position = group_by_position(samples, n_positions);
  ThresholdFit fit;
  for (int k = 0; k < n_positions; ++k) {
    fit.positions.push_back(fit_position(by_position[static_cast<size_t>(k)], k, options));
    fit.thresholds.push_back(fit.positions.back().threshold);
  }
  return fit;
}

float AcceptanceCurve::at(float c) const {
  if (confidence.empty()) return 0.0f;
  if (c <= confidence.front()) return probability.front();
  if (c >= confidence.back()) return probability.back();
  const size_t i = static_cast<size_t>(std::upper_bound(confidence.begin(), confidence.end(), c) -
                                       confidence.begin());
  const float c0 = confidence[i - 1], c1 = confidence[i];
  const float p0 = probability[i - 1], p1 = probability[i];
  return c1 > c0 ? p0 + (p1 - p0) * (c - c0) / (c1 - c0) : p1;
}

std::vector<AcceptanceCurve> fit_acceptance_curves(std::span<const ConfidenceSample> samples,
                                                   int n_positions,
                                                   const AcceptanceFitOptions& options) {
  DSPARK_CHECK_KIND(invalid_input, n_positions >= 0, "fit_acceptance_curves: {} positions",
                    n_positions);
  DSPARK_CHECK_KIND(invalid_input, options.bin_samples >= 1 && options.max_bins >= 1,
                    "fit_acceptance_curves: {} samples per bin, {} bins", options.bin_samples,
                    options.max_bins);
  std::vector<std::vector<ConfidenceSample>> by_position = group_by_position(samples, n_positions);
  std::vector<AcceptanceCurve> curves(static_cast<size_t>(n_positions));
  for (int k = 0; k < n_positions; ++k) {
    std::vector<ConfidenceSample>& s = by_position[static_cast<size_t>(k)];
    const auto n = static_cast<int64_t>(s.size());
    if (n == 0 || n < options.min_samples) continue;
    std::sort(s.begin(), s.end(), [](const ConfidenceSample& a, const ConfidenceSample& b) {
      return a.confidence < b.confidence;
    });
    // Equal-count bins; the pooled blocks of the isotonic fit carry their sums.
    struct Block {
      double confidence_sum = 0;
      int64_t n = 0, accepted = 0;
      double rate() const { return smoothed_precision(accepted, n); }
    };
    const int64_t bins =
        std::clamp<int64_t>(n / options.bin_samples, 1, static_cast<int64_t>(options.max_bins));
    std::vector<Block> blocks;
    for (int64_t b = 0; b < bins; ++b) {
      Block block;
      for (int64_t i = b * n / bins; i < (b + 1) * n / bins; ++i) {
        const ConfidenceSample& x = s[static_cast<size_t>(i)];
        block.confidence_sum += x.confidence;
        ++block.n;
        block.accepted += x.accepted ? 1 : 0;
      }
      blocks.push_back(block);
      // Pool adjacent violators: merge while the new block's acceptance is below the one before.
      while (blocks.size() > 1 && blocks.back().rate() < blocks[blocks.size() - 2].rate()) {
        const Block last = blocks.back();
        blocks.pop_back();
        blocks.back().confidence_sum += last.confidence_sum;
        blocks.back().n += last.n;
        blocks.back().accepted += last.accepted;
      }
    }
    AcceptanceCurve& c = curves[static_cast<size_t>(k)];
    for (const Block& b : blocks) {
      c.confidence.push_back(static_cast<float>(b.confidence_sum / static_cast<double>(b.n)));
      c.probability.push_back(static_cast<float>(b.rate()));
    }
  }
  return curves;
}

ThresholdsFile read_thresholds_file(const fs::path& file) {
  const json j = read_json_file(file);
  const std::string source = file.string();
  DSPARK_CHECK_KIND(io, j.is_object(), "{}: expected a JSON object", source);
  const std::optional<std::string> format = json_optional_string(j, "format", source);
  DSPARK_CHECK_KIND(io, !format || *format == kFormat, "{}: format '{}' is not '{}'", source,
                    format.value_or(""), kFormat);
  const auto it = j.find("thresholds");
  DSPARK_CHECK_KIND(io, it != j.end() && it->is_array(),
                    "{}: missing required key 'thresholds' (a list of numbers)", source);
  ThresholdsFile out;
  for (const json& v : *it) {
    DSPARK_CHECK_KIND(io, v.is_number(), "{}: 'thresholds' must hold numbers, got {}", source,
                      json_brief(v));
    const double t = v.get<double>();
    DSPARK_CHECK_KIND(io, t >= 0.0 && t <= 1.0, "{}: threshold {} is outside [0, 1]", source, t);
    out.thresholds.push_back(static_cast<float>(t));
  }
  out.target_precision = json_optional_number(j, "target_precision", source).value_or(0.0);
  out.block_size = static_cast<int>(json_optional_int(j, "block_size", source).value_or(0));
  out.n_samples = json_optional_int(j, "samples", source).value_or(0);
  if (const auto a = j.find("acceptance"); a != j.end()) {
    DSPARK_CHECK_KIND(io, a->is_array(), "{}: 'acceptance' must be a list, got {}", source,
                      json_brief(*a));
    for (const json& entry : *a) {
      const std::optional<int64_t> k =
          entry.is_object() ? json_optional_int(entry, "position", source) : std::nullopt;
      DSPARK_CHECK_KIND(io, k && *k >= 0 && *k < 4096,
                        "{}: an 'acceptance' entry needs a 'position' in [0, 4096), got {}", source,
                        json_brief(entry));
      if (out.acceptance.size() <= static_cast<size_t>(*k))
        out.acceptance.resize(static_cast<size_t>(*k) + 1);
      out.acceptance[static_cast<size_t>(*k)] = read_curve(entry, source);
    }
  }
  return out;
}

json position_fit_json(const PositionFit& p) {
  return {{"position", p.position},   {"samples", p.n_samples}, {"accepted", p.n_accepted},
          {"threshold", p.threshold}, {"kept", p.n_kept},       {"precision", p.precision},
          {"reason", p.reason}};
}

json acceptance_curve_json(int position, const AcceptanceCurve& curve) {
  return {
      {"position", position}, {"confidence", curve.confidence}, {"probability", curve.probability}};
}

void write_thresholds_file(const fs::path& file, const ThresholdsFile& c) {
  json positions = json::array();
  for (const PositionFit& p : c.positions) positions.push_back(position_fit_json(p));
  json j = {{"format", kFormat},
            {"thresholds", c.thresholds},
            {"target_precision", c.target_precision},
            {"block_size", c.block_size},
            {"samples", c.n_samples},
            {"positions", positions}};
  if (!c.acceptance.empty()) {
    json curves = json::array();
    for (size_t k = 0; k < c.acceptance.size(); ++k)
      if (!c.acceptance[k].empty())
        curves.push_back(acceptance_curve_json(static_cast<int>(k), c.acceptance[k]));
    j["acceptance"] = curves;
  }
  const fs::path tmp = fs::path(file.string() + ".tmp");
  {
    std::ofstream out(tmp);
    DSPARK_CHECK_KIND(io, out.good(), "{}: cannot write", tmp.string());
    out << j.dump(2) << "\n";
    DSPARK_CHECK_KIND(io, out.good(), "{}: write failed", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  DSPARK_CHECK_KIND(io, !ec, "{}: cannot rename to {}: {}", tmp.string(), file.string(),
                    ec.message());
}

}  // namespace dspark
