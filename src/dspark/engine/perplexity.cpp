#include "dspark/engine/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "dspark/core/buffer.h"
#include "dspark/core/elapsed.h"
#include "dspark/core/error.h"
#include "dspark/kv/paged_kv_cache.h"

namespace dspark {

double token_nll(std::span<const float> row, int32_t target) {
  DSPARK_CHECK_KIND(invalid_input, target >= 0 && static_cast<size_t>(target) < row.size(),
                    "token {} is outside the vocabulary of {} logits", target, row.size());
  const float top = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - top);
  return std::log(sum) - (static_cast<double>(row[static_cast<size_t>(target)]) - top);
}

PerplexityResult perplexity(Model& model, Context& ctx, std::span<const int32_t> tokens,
                            const PerplexityOptions& o,
                            const std::function<void(int, int, double)>& progress) {
  const int n_ctx = o.context;
  DSPARK_CHECK_KIND(invalid_input, n_ctx >= 4,
                    "perplexity: the context must be >= 4 tokens, got {}", n_ctx);
  DSPARK_CHECK_KIND(invalid_input, o.forward_chunk > 0,
                    "perplexity: forward_chunk must be > 0, got {}", o.forward_chunk);
  const int64_t available = static_cast<int64_t>(tokens.size()) / n_ctx;
  DSPARK_CHECK_KIND(invalid_input, available >= 1,
                    "perplexity: the text has {} tokens, fewer than one window of {} (use a longer "
                    "text or a smaller context)",
                    tokens.size(), n_ctx);
  const int windows =
      static_cast<int>(o.max_windows > 0 ? std::min<int64_t>(available, o.max_windows) : available);
  constexpr int kPage = 16;
  PagedKvCache kv(model.kv_shape(kPage, (n_ctx + kPage - 1) / kPage + 1), ctx.device());
  const int first = n_ctx / 2;  // the first scored position (predicting token first + 1)
  const int vocab = model.config().vocab_size;

  PerplexityResult r;
  r.windows = windows;
  r.text_tokens = static_cast<int64_t>(tokens.size());
  double sum = 0, sum_sq = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < windows; ++w) {
    std::vector<int32_t> window(tokens.begin() + static_cast<int64_t>(w) * n_ctx,
                                tokens.begin() + static_cast<int64_t>(w + 1) * n_ctx);
    if (o.bos) window[0] = *o.bos;
    const SeqId seq = kv.create_sequence();
    double window_sum = 0;
    for (int begin = 0; begin < n_ctx; begin += o.forward_chunk) {
      const int end = std::min(n_ctx, begin + o.forward_chunk);
      ForwardBatch b;
      b.tokens.assign(window.begin() + begin, window.begin() + end);
      b.row_indptr = {0, end - begin};
      b.seqs = {seq};
      // Positions first .. n_ctx - 2 predict the next token of the window.
      for (int i = std::max(begin, first); i < std::min(end, n_ctx - 1); ++i)
        b.logit_indices.push_back(i - begin);
      const ForwardOutput out = model.forward(ctx, kv, b);
      if (b.logit_indices.empty()) continue;
      const std::vector<float> logits = to_f32_vector(out.logits);
      for (size_t k = 0; k < b.logit_indices.size(); ++k) {
        const int pos = begin + b.logit_indices[k];
        const double nll =
            token_nll(std::span<const float>(logits).subspan(k * static_cast<size_t>(vocab), vocab),
                      window[static_cast<size_t>(pos) + 1]);
        window_sum += nll;
        sum_sq += nll * nll;
      }
    }
    kv.release(seq);
    const int scored = n_ctx - 1 - first;
    sum += window_sum;
    r.scored += scored;
    r.window_ppl.push_back(std::exp(window_sum / scored));
    if (progress) progress(w + 1, windows, std::exp(sum / static_cast<double>(r.scored)));
  }
  r.seconds = elapsed_ms(t0) / 1e3;
  const double n = static_cast<double>(r.scored);
  r.mean_nll = sum / n;
  const double var = std::max(0.0, sum_sq / n - r.mean_nll * r.mean_nll);
  r.nll_stderr = n > 1 ? std::sqrt(var / (n - 1)) : 0;
  r.ppl = std::exp(r.mean_nll);
  r.ppl_stderr = r.ppl * r.nll_stderr;
  return r;
}

}  // namespace dspark
