// bench_json_mask: the host cost of one structured-output mask row on a real vocabulary, at three
// document states of the any-object schema (the first token, inside a string, inside an array of
// numbers): a cache miss (the trie walk), a cache hit (with the copy into a round's mask list),
// and apply_token_mask on one CPU logits row.
//
//   bench_json_mask --tokenizer DIR [--logits-width 151936] [--iters 50]
// DIR holds tokenizer.json (../shared/assets/tokenizers/qwen3: `xz -dk tokenizer.json.xz`).
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/json_mask.h"
#include "dspark/engine/json_output.h"
#include "dspark/ops/token_mask.h"

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double ms_per_call(int iters, F&& f) {
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
}

int run(const std::string& dir, int64_t width, int iters) {
  const Tokenizer tok = Tokenizer::from_file(dir);
  const auto c = make_json_constraint(JsonSchema::any_object(), tok, {tok.eos_id()});
  DSPARK_CHECK_KIND(invalid_input, width >= tok.vocab_size(),
                    "--logits-width {} is below the vocabulary ({})", width, tok.vocab_size());
  std::printf("vocabulary %d tokens, logits width %lld, %d iterations\n", tok.vocab_size(),
              static_cast<long long>(width), iters);
  std::printf("%-22s %12s %12s %12s\n", "state", "miss ms", "hit ms", "apply ms");
  Context ctx(Device::cpu());
  OwnedTensor logits(DType::f32, Shape{1, width}, Device::cpu());
  const std::vector<int32_t> rows = {0};
  for (const char* prefix : {"", "{\"name\": \"Ali", "{\"a\": [1, 2"}) {
    JsonMatcher m(&c->schema);
    DSPARK_CHECK(m.feed(std::string_view(prefix)), "bench state rejected");
    const double miss = ms_per_call(iters, [&] { JsonMaskCache().mask(*c, width, m); });
    JsonMaskCache cache;
    std::vector<uint32_t> words;
    const double hit = ms_per_call(iters * 100, [&] {
      const auto w = cache.mask(*c, width, m);
      words.assign(w.begin(), w.end());
    });
    const double apply =
        ms_per_call(iters, [&] { apply_token_mask(ctx, logits.view(), rows, words); });
    std::printf("%-22s %12.3f %12.4f %12.3f\n", (std::string("'") + prefix + "'").c_str(), miss,
                hit, apply);
  }
  return 0;
}

}  // namespace
}  // namespace dspark

int main(int argc, char** argv) {
  CLI::App app("bench_json_mask: host cost of structured-output mask rows");
  std::string dir;
  int64_t width = 151936;
  int iters = 50;
  app.add_option("--tokenizer", dir, "Directory with tokenizer.json")->required();
  app.add_option("--logits-width", width, "Logits row width (the model's vocab_size)")
      ->capture_default_str();
  app.add_option("--iters", iters, "Calls timed per figure")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return dspark::run(dir, width, iters);
}
