#include "dspark/engine/text_generation.h"

#include <system_error>

#include "dspark/core/error.h"
#include "dspark/io/gguf.h"
#include "dspark/model/gguf_model.h"

namespace dspark {

SamplingParams default_sampling(const GenerationDefaults& d) {
  SamplingParams p;
  if (!d.do_sample) return p;  // greedy
  p.temperature = d.temperature >= 0 ? d.temperature : 1.0f;
  p.top_k = d.top_k >= 0 ? d.top_k : 50;
  p.top_p = d.top_p >= 0 ? d.top_p : 1.0f;
  p.min_p = d.min_p >= 0 ? d.min_p : 0.0f;
  return p;
}

TextModel load_text_model(const std::filesystem::path& dir, Device device, DType dtype) {
  // A GGUF file (or a directory holding one and no config.json): config, tokenizer and weights
  // all come from the one file.
  if (const std::optional<std::filesystem::path> gguf = resolve_gguf_model(dir)) {
    const GgufFile file = GgufFile::open(*gguf);
    Tokenizer tokenizer = Tokenizer::from_gguf(file);
    std::unique_ptr<Model> model = load_gguf_model(file, device, dtype);
    GenerationDefaults defaults;  // GGUF carries no generation config: greedy
    std::vector<int32_t> eos = default_eos_token_ids(model->config(), defaults);
    return TextModel{std::move(model), std::move(tokenizer), std::move(defaults), std::move(eos)};
  }
  // Cheap checks first (directory, config, tokenizer), then the weights.
  std::error_code ec;
  DSPARK_CHECK_KIND(io, std::filesystem::is_directory(dir, ec),
                    "model directory '{}' does not exist or is not a directory", dir.string());
  (void)load_model_config(dir);
  Tokenizer tokenizer = Tokenizer::from_file(dir);
  std::unique_ptr<Model> model = load_model(dir, device, dtype);
  GenerationDefaults defaults = load_generation_defaults(dir);
  std::vector<int32_t> eos = default_eos_token_ids(model->config(), defaults);
  return TextModel{std::move(model), std::move(tokenizer), std::move(defaults), std::move(eos)};
}

namespace {
// The prompt with the tokenizer's special-token template; fills in the model's EOS set.
std::vector<int32_t> encode_prompt(const TextModel& tm, std::string_view prompt,
                                   GenerateOptions& options) {
  DSPARK_CHECK_KIND(invalid_input, !prompt.empty(), "the prompt is empty");
  std::vector<int32_t> ids = tm.tokenizer.encode(prompt, /*add_special_tokens=*/true);
  DSPARK_CHECK_KIND(invalid_input, !ids.empty(), "the prompt encodes to no tokens");
  if (options.eos_token_ids.empty()) options.eos_token_ids = tm.eos_token_ids;
  return ids;
}
}  // namespace

GenerateResult generate_text(TextModel& tm, Context& ctx, std::string_view prompt,
                             GenerateOptions options, TextCallback on_text) {
  const std::vector<int32_t> ids = encode_prompt(tm, prompt, options);
  TokenizerDetokenizer detokenizer(tm.tokenizer);
  return generate(*tm.model, ctx, ids, options, &detokenizer, std::move(on_text));
}

RequestOutput generate_text_speculative(TextModel& tm, Context& ctx, std::string_view prompt,
                                        GenerateOptions options, DraftSource* source,
                                        const SpecConfig& config, TextCallback on_text) {
  RequestInput request;
  request.prompt = encode_prompt(tm, prompt, options);
  request.options = options;
  TokenizerDetokenizer detokenizer(tm.tokenizer);
  request.detokenizer = &detokenizer;
  request.on_text = std::move(on_text);
  std::vector<RequestInput> requests;
  requests.push_back(std::move(request));
  return std::move(generate_speculative(*tm.model, ctx, source, std::move(requests), config)[0]);
}

}  // namespace dspark
