// Builds the DraftSource a user asked for (`--draft`):
//   none          no drafting (plain decoding)
//   ngram         prompt lookup (NgramConfig)
//   mtp           the target's own next-token prediction layer (DeepSeek-V3, GLM-4.5, GLM-5:
//                 spec/mtp_source.h)
//   model:DIR     an independent draft model (a Hugging Face causal LM sharing the vocabulary)
//   DIR           detected from DIR/config.json: a DFlash / DSpark block drafter (DeepSpec,
//                 SpecForge or z-lab layout), else an independent draft model
#pragma once

#include <memory>
#include <string>

#include "dspark/model/model.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {

struct DraftOptions {
  std::string draft = "none";
  NgramConfig ngram;
  int draft_model_kv_tokens =
      1 << 16;  // KV capacity (tokens, all rows) of a draft model or drafter
  // --draft-vocab FILE: a DSpark / DFlash drafter drafts greedy rounds over these token ids only
  // (spec/dspark/draft_vocab.h); empty: the whole vocabulary. Refused for other sources.
  std::string draft_vocab;
  // --draft-fp8: a DSpark / DFlash drafter's projections and LM head in FP8 (E4M3, per-row scales;
  // CUDA, bf16). Refused for other sources.
  bool draft_fp8 = false;
  // Ablations of a DSpark drafter (`--no-markov`, `--no-thresholds`; dspark eval and regen):
  // markov false drafts from the backbone's base logits alone (the checkpoint as plain DFlash);
  // thresholds false ignores dspark_thresholds.json (no confidence pruning). Refused for other
  // sources, and markov false for a drafter without a Markov head.
  bool markov = true;
  bool thresholds = true;
};

struct CreatedSource {
  std::unique_ptr<DraftSource> source;  // null for "none"
  std::string kind;                     // "none", "ngram", "mtp", "model", "dspark", "dflash"
  int default_gamma = 0;                // the drafter's natural proposal length (0: none)
};

// Throws invalid_input (a bad --draft value, a drafter that does not fit the target) or io.
CreatedSource create_draft_source(const DraftOptions& options, Model& target);

}  // namespace dspark
