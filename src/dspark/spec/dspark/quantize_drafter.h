// `dspark quantize` on a DFlash / DSpark drafter checkpoint (spec/dspark/drafter_config.h's
// layouts): the drafter policy over model/quantize_checkpoint.h, and the check run on what it
// wrote. See docs/quantization.md.
//
// Policy: every shape-eligible 2-D weight is quantized, embed_tokens and the Markov head's
// markov_w1 included (both read as quantized embeddings: rows gathered, then dequantized);
// confidence_head.* stays as stored (it is tiny, and the calibrated thresholds compare its output
// directly); bits 4 or 8, groups of 32 or 64.
#pragma once

#include <filesystem>
#include <functional>

#include "dspark/model/quantize_checkpoint.h"

namespace dspark {

// True for the modules the drafter policy keeps float (confidence_head.*, under any prefix).
bool drafter_keeps_float(std::string_view module);

// quantize_checkpoint with the drafter policy (options.keep_float is replaced). Throws
// ErrorKind::unsupported for bits other than 4 / 8 or groups other than 32 / 64.
QuantizeSummary quantize_drafter(QuantizeOptions options,
                                 const std::function<void(const QuantizeProgress&)>& progress);

// What the check saw: one row of target taps through the reloaded drafter's context projection.
struct DrafterSmokeTest {
  int layers = 0;
  int64_t features = 0;        // m * H, the row's width
  int matrices_as_blocks = 0;  // fc, projections, embed_tokens / lm_head, Markov tables as blocks
  double features_rms = 0;     // of the context features (after hidden_norm)
  double kv_rms = 0;           // of every layer's K/V rows
};

// Reloads the drafter at `dir` on the CPU (f32) and projects one fixed row of taps into its
// context features and each layer's K/V. Throws ErrorKind::io when a value is not finite (and as
// loading does for a broken checkpoint).
DrafterSmokeTest drafter_smoke_test(const std::filesystem::path& dir);

}  // namespace dspark
