#include "dspark/engine/side_by_side.h"

#include <algorithm>

namespace dspark {

SideBySideResult run_side_by_side(TextModel& tm, Context& ctx, const std::vector<int32_t>& prompt,
                                  const GenerateOptions& options, DraftSource* source,
                                  const SpecConfig& config, TextCallback on_text) {
  GenerateOptions o = options;
  if (o.eos_token_ids.empty()) o.eos_token_ids = tm.eos_token_ids;
  {
    GenerateOptions warm = o;
    warm.max_tokens = std::min(4, o.max_tokens);
    warm.stop.clear();
    (void)generate(*tm.model, ctx, prompt, warm, nullptr, {});
    if (source) {
      std::vector<RequestInput> r(1);
      r[0].prompt = prompt;
      r[0].options = warm;
      (void)generate_speculative(*tm.model, ctx, source, std::move(r), config);
    }
  }

  SideBySideResult out;
  {
    TokenizerDetokenizer detok(tm.tokenizer);
    std::vector<RequestInput> r(1);
    r[0].prompt = prompt;
    r[0].options = o;
    r[0].detokenizer = &detok;
    r[0].on_text = std::move(on_text);
    out.speculative =
        std::move(generate_speculative(*tm.model, ctx, source, std::move(r), config)[0]);
  }
  {
    TokenizerDetokenizer detok(tm.tokenizer);
    out.plain = generate(*tm.model, ctx, prompt, o, &detok, {});
  }
  out.identical = out.plain.tokens == out.speculative.result.tokens;
  out.plain_tok_per_s = out.plain.timings.decode_tok_per_s;
  out.spec_tok_per_s = out.speculative.result.timings.decode_tok_per_s;
  return out;
}

}  // namespace dspark
