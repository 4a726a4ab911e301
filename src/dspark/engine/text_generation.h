// Text in, text out: a model directory loaded with its tokenizer and generation defaults, and
// plain generation from a prompt string (engine/generate.h does the token loop).
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/tokenizer.h"

namespace dspark {

// The tokenizer's IncrementalDecoder behind the Detokenizer seam (special tokens skipped).
class TokenizerDetokenizer final : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(const Tokenizer& tokenizer) : decoder_(tokenizer, true) {}
  std::string push(int32_t token) override { return decoder_.feed(token); }
  std::string flush() override { return decoder_.flush(); }

 private:
  IncrementalDecoder decoder_;
};

// The sampling transformers would use from generation_config.json: greedy unless do_sample, then
// its temperature / top_k / top_p / min_p, with transformers' defaults for unset fields
// (temperature 1, top_k 50, top_p 1, min_p off).
SamplingParams default_sampling(const GenerationDefaults& defaults);

struct TextModel {
  std::unique_ptr<Model> model;
  Tokenizer tokenizer;
  GenerationDefaults defaults;
  std::vector<int32_t> eos_token_ids;  // config.json + generation_config.json
};

// config.json + safetensors + tokenizer.json (+ generation_config.json) of `dir`.
TextModel load_text_model(const std::filesystem::path& dir, Device device, DType dtype);

// Encodes the prompt (with the tokenizer's special-token template, e.g. Llama's BOS), generates
// and streams the text. options.eos_token_ids empty -> the model's EOS set.
GenerateResult generate_text(TextModel& tm, Context& ctx, std::string_view prompt,
                             GenerateOptions options, TextCallback on_text = {});

// The same through the speculative engine with `source` (null: plain decoding in the same loop).
RequestOutput generate_text_speculative(TextModel& tm, Context& ctx, std::string_view prompt,
                                        GenerateOptions options, DraftSource* source,
                                        const SpecConfig& config, TextCallback on_text = {});

}  // namespace dspark
