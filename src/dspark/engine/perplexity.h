// Perplexity of a model over a text (`dspark perplexity`): the text's tokens cut into windows of
// `context` tokens, each window forwarded from an empty cache, and the second half of each window
// scored (every scored token sees at least context / 2 tokens before it), as llama.cpp's
// llama-perplexity does, so that the two tools' figures on the same file and text compare. With a
// BOS token the window's first token is replaced by it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/model/model.h"

namespace dspark {

struct PerplexityOptions {
  int context = 512;           // tokens per window, >= 4
  int max_windows = 0;         // 0: every whole window of the text
  int forward_chunk = 512;     // tokens per forward (bounds activation memory)
  std::optional<int32_t> bos;  // replaces each window's first token
};

struct PerplexityResult {
  int windows = 0;
  int64_t text_tokens = 0;         // the text's tokens
  int64_t scored = 0;              // tokens whose log-probability was summed
  double mean_nll = 0;             // mean negative log-likelihood (nats) of the scored tokens
  double nll_stderr = 0;           // its standard error (over tokens)
  double ppl = 0;                  // exp(mean_nll)
  double ppl_stderr = 0;           // ppl * nll_stderr (first order)
  std::vector<double> window_ppl;  // each window's own perplexity
  double seconds = 0;              // forwards and scoring
};

// Throws ErrorKind::invalid_input for a context < 4 or a text shorter than one window (naming
// both lengths). `progress(done, total, running_ppl)` is called after each window.
PerplexityResult perplexity(Model& model, Context& ctx, std::span<const int32_t> tokens,
                            const PerplexityOptions& options,
                            const std::function<void(int, int, double)>& progress = {});

// The negative log-likelihood of `target` under logits row `row` (log-softmax in double).
double token_nll(std::span<const float> row, int32_t target);

}  // namespace dspark
