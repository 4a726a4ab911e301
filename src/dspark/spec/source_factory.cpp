#include "dspark/spec/source_factory.h"

#include <filesystem>

#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/dspark/draft_vocab.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "dspark/spec/mtp_source.h"

namespace dspark {
namespace {

// Drafts per round of an MTP layer chained on its own output (one layer predicts one token ahead;
// each chained step drifts further from what it was trained on).
constexpr int kMtpDefaultGamma = 3;

CreatedSource draft_model(const std::filesystem::path& dir, Model& target, int kv_tokens) {
  std::unique_ptr<Model> model = load_model(dir, target.device(), target.activation_dtype());
  DSPARK_CHECK_KIND(invalid_input, model->config().vocab_size == target.config().vocab_size,
                    "draft model {} has vocabulary size {}, the target has {}: they must share "
                    "the tokenizer",
                    dir.string(), model->config().vocab_size, target.config().vocab_size);
  return CreatedSource{std::make_unique<DraftModelSource>(std::move(model), kv_tokens), "model", 4};
}

}  // namespace

CreatedSource create_draft_source(const DraftOptions& o, Model& target) {
  if (o.draft.empty() || o.draft == "none") return CreatedSource{nullptr, "none", 0};
  auto refuse_drafter_options = [&](const char* kind) {  // options of block drafters only
    DSPARK_CHECK_KIND(invalid_input, o.draft_vocab.empty(),
                      "--draft-vocab applies to DSpark / DFlash drafters, not to {}", kind);
    DSPARK_CHECK_KIND(invalid_input, !o.draft_fp8,
                      "--draft-fp8 applies to DSpark / DFlash drafters, not to {}", kind);
    DSPARK_CHECK_KIND(invalid_input, o.markov, "--no-markov applies to DSpark drafters, not to {}",
                      kind);
    DSPARK_CHECK_KIND(invalid_input, o.thresholds,
                      "--no-thresholds applies to DSpark / DFlash drafters, not to {}", kind);
  };
  if (o.draft == "ngram") {
    refuse_drafter_options("prompt lookup (ngram)");
    return CreatedSource{std::make_unique<NgramSource>(o.ngram), "ngram", 4};
  }
  if (o.draft == "mtp") {
    refuse_drafter_options("the target's MTP layer");
    auto layer = MtpLayer::load(target.config(), target.device(), target.activation_dtype());
    return CreatedSource{
        std::make_unique<MtpSource>(std::move(layer), target, o.draft_model_kv_tokens), "mtp",
        kMtpDefaultGamma};
  }
  if (o.draft.rfind("model:", 0) == 0) {
    refuse_drafter_options("a draft model");
    return draft_model(o.draft.substr(6), target, o.draft_model_kv_tokens);
  }
  const std::filesystem::path dir = o.draft;
  std::error_code ec;
  DSPARK_CHECK_KIND(invalid_input, std::filesystem::is_directory(dir, ec),
                    "--draft '{}' is not none, ngram, mtp, model:DIR or a drafter directory",
                    o.draft);
  if (is_block_drafter_dir(dir)) {
    const DrafterConfig cfg = load_drafter_config(dir);
    const bool dflash = cfg.layout == DrafterLayout::dflash;
    DSPARK_CHECK_KIND(invalid_input, o.markov || cfg.markov_head != MarkovHeadType::none,
                      "--no-markov: the drafter in {} has no Markov head (a DFlash drafter)",
                      dir.string());
    DSparkSourceOptions options;
    options.kv_tokens = o.draft_model_kv_tokens;
    if (!o.draft_vocab.empty()) options.draft_vocab = read_draft_vocab(o.draft_vocab);
    options.fp8_weights = o.draft_fp8;
    options.markov_enabled = o.markov;
    return CreatedSource{load_dspark_source(dir, target, options, o.thresholds),
                         dflash ? "dflash" : "dspark", cfg.drafts_per_block(cfg.block_size)};
  }
  refuse_drafter_options("a draft model");
  return draft_model(dir, target, o.draft_model_kv_tokens);
}

}  // namespace dspark
