// Greedy losslessness check shared by the CPU suite and the CUDA suite.
#include "common/lossless.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "dspark/spec/ngram_source.h"
#include "test_util.h"

namespace dspark::test {
namespace {

constexpr int kNewTokens = 24;

std::filesystem::path model_dir(const std::string& name) {
  return test::data_dir() / "models" / name;
}

std::vector<std::vector<int32_t>> test_prompts(const std::string& model, int vocab) {
  std::vector<std::vector<int32_t>> prompts;
  const SafeTensors goldens = SafeTensors::open(model_dir(model) / "goldens.safetensors");
  for (int i = 0; goldens.contains(fmt::format("p{}.tokens", i)); ++i)
    prompts.push_back(to_vector<int32_t>(goldens.get(fmt::format("p{}.tokens", i))));
  // Repetitive prompts (prompt lookup finds matches) and random ones, up to 8 in all.
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> tok(3, vocab - 1);
  std::vector<int32_t> pattern = {tok(gen), tok(gen), tok(gen), tok(gen)};
  std::vector<int32_t> rep;
  for (int i = 0; i < 5; ++i) rep.insert(rep.end(), pattern.begin(), pattern.end());
  prompts.push_back(rep);
  while (prompts.size() < 8) {
    std::vector<int32_t> p(static_cast<size_t>(5 + 7 * prompts.size()));
    for (auto& t : p) t = tok(gen);
    prompts.push_back(p);
  }
  return prompts;
}

GenerateOptions greedy_options() {
  GenerateOptions o;
  o.max_tokens = kNewTokens;
  o.eos_token_ids = {};  // run the full length: more tokens compared
  return o;
}

struct SourceCase {
  std::string name;
  std::function<std::unique_ptr<DraftSource>()> make;
  bool expect_acceptance;  // drafts from the target itself must be accepted
};

}  // namespace

void check_greedy_lossless(const std::string& name, Device device, DType dtype) {
  if (!std::filesystem::exists(model_dir(name) / "config.json"))
    GTEST_SKIP() << "fixture " << name << " missing";
  Context ctx(device);
  auto target = load_model(model_dir(name), device, dtype);
  const auto prompts = test_prompts(name, target->config().vocab_size);

  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(*target, ctx, p, greedy_options()).tokens);

  const std::string other = name == "qwen2" ? "llama3" : "qwen2";
  std::vector<SourceCase> sources = {
      {"ngram",
       [] {
         return std::make_unique<NgramSource>(NgramConfig{1, 3});
       },
       false},
      {fmt::format("draft-model:{}", other),
       [&, device, dtype] {
         return std::make_unique<DraftModelSource>(load_model(model_dir(other), device, dtype),
                                                   4096);
       },
       false},
      {"draft-model:self",
       [&, device, dtype] {
         return std::make_unique<DraftModelSource>(load_model(model_dir(name), device, dtype),
                                                   4096);
       },
       true},
  };
  for (const auto& sc : sources) {
    for (int gamma : {1, 2, 4, 8}) {
      auto source = sc.make();
      std::vector<RequestInput> reqs;
      for (const auto& p : prompts) reqs.push_back(RequestInput{p, greedy_options(), nullptr, {}});
      SpecConfig cfg;
      cfg.gamma = gamma;
      cfg.prefill_chunk = 40;  // several prefill chunks across rows
      const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
      SpecTelemetry total;
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(out[i].result.tokens, plain[i])
            << device.name() << " " << name << " source " << sc.name << " gamma " << gamma
            << " prompt " << i;
        total.merge(out[i].spec);
      }
      if (sc.expect_acceptance) {
        EXPECT_GT(total.acceptance(), 0.9) << sc.name << " gamma " << gamma;
      }
      std::printf(
          "[ lossless ] %-5s %-10s %-20s gamma=%d rounds=%lld drafted=%lld accepted=%lld "
          "tau=%.2f\n",
          device.name().c_str(), name.c_str(), sc.name.c_str(), gamma,
          static_cast<long long>(total.rounds), static_cast<long long>(total.drafted),
          static_cast<long long>(total.accepted), total.tau());
    }
  }
}

std::vector<NamedSource> self_ngram_fixture_sources(const std::string& model_name,
                                                    const std::string& drafter) {
  const std::filesystem::path dir = data_dir() / "models" / model_name;
  return {
      {"draft-model:self",
       [dir](Model&) {
         return std::make_unique<DraftModelSource>(load_model(dir, Device::cpu(), DType::f32),
                                                   8192);
       }},
      {"ngram",
       [](Model&) {
         return std::make_unique<NgramSource>(NgramConfig{1, 3});
       }},
      dspark_fixture_source(drafter),
  };
}

NamedSource dspark_fixture_source(const std::string& fixture) {
  return {"dspark:" + fixture, [fixture](Model& target) -> std::unique_ptr<DraftSource> {
            DSparkSourceOptions opt;
            opt.kv_tokens = 8192;
            return load_dspark_source(data_dir() / "drafters" / fixture, target, opt, false);
          }};
}

void check_coupled_equals_plain(const std::string& name, Device device,
                                const std::vector<NamedSource>& extra, DType dtype) {
  if (!std::filesystem::exists(model_dir(name) / "config.json"))
    GTEST_SKIP() << "fixture " << name << " missing";
  Context ctx(device);
  auto target = load_model(model_dir(name), device, dtype);
  const auto prompts = test_prompts(name, target->config().vocab_size);
  const std::string other = name == "qwen2" ? "llama3" : "qwen2";
  std::vector<NamedSource> sources = {
      {"none", [](Model&) { return std::unique_ptr<DraftSource>(); }},
      {"ngram",
       [](Model&) {
         return std::make_unique<NgramSource>(NgramConfig{1, 3});
       }},
      {fmt::format("draft-model:{}", other),
       [&](Model&) {
         return std::make_unique<DraftModelSource>(load_model(model_dir(other), device, dtype),
                                                   8192);
       }},
      {"draft-model:self",
       [&](Model&) {
         return std::make_unique<DraftModelSource>(load_model(model_dir(name), device, dtype),
                                                   8192);
       }},
  };
  sources.insert(sources.end(), extra.begin(), extra.end());
  const std::vector<uint64_t> seeds = {1, 2, 3};
  for (float temperature : {0.7f, 1.0f}) {
    GenerateOptions o = greedy_options();
    o.sampling.temperature = temperature;
    o.sampling.top_p = 0.9f;
    o.sampling.spec = SpecSampling::coupled;
    std::vector<RequestInput> reqs;
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : prompts)
      for (uint64_t seed : seeds) {
        o.seed = seed;
        plain.push_back(generate(*target, ctx, p, o).tokens);
        reqs.push_back(RequestInput{p, o, nullptr, {}});
      }
    for (const auto& sc : sources) {
      for (int gamma : {2, 5}) {
        auto source = sc.make(*target);
        SpecConfig cfg;
        cfg.gamma = gamma;
        cfg.prefill_chunk = 40;
        const auto out = generate_speculative(*target, ctx, source.get(), reqs, cfg);
        SpecTelemetry total;
        int same = 0;
        for (size_t i = 0; i < plain.size(); ++i) {
          EXPECT_EQ(out[i].result.tokens, plain[i])
              << device.name() << " " << name << " source " << sc.name << " gamma " << gamma
              << " T " << temperature << " request " << i;
          same += out[i].result.tokens == plain[i];
          total.merge(out[i].spec);
        }
        std::printf(
            "[ coupled  ] %-5s %-10s %-22s T=%.1f gamma=%d identical %d/%zu drafted=%lld "
            "accepted=%lld tau=%.2f\n",
            device.name().c_str(), name.c_str(), sc.name.c_str(), temperature, gamma, same,
            plain.size(), static_cast<long long>(total.drafted),
            static_cast<long long>(total.accepted), total.tau());
        // The target drafting for itself draws with the target's own uniforms: it proposes the
        // target's samples (the coupling works, not only the fallback to the target's sample).
        if (sc.name == "draft-model:self") {
          EXPECT_GT(total.acceptance(), 0.9) << "gamma " << gamma;
        }
        if (!source) break;  // gamma means nothing without drafts
      }
    }
  }
}

}  // namespace dspark::test
