// The on-disk cache of the verify cost profile (engine/verify_cost_cache.h): a stored profile is
// found again under the same key and under no key that differs in one field; the model identity
// follows the weight files; corrupt files are reported and rewritten; an unwritable directory is
// reported and skipped; an engine with the cache loads the profile a previous engine measured, an
// engine without it writes nothing, and greedy output is the same with and without the cache.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/thread_pool.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/engine/verify_cost_cache.h"
#include "dspark/model/registry.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

using test::TempDir;

int count_files(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

void write_file(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

VerifyCostKey base_key() {
  VerifyCostKey k;
  k.build = "/usr/bin/dspark: 100 1";
  k.model = "/models/m; config.json 10 1; model.safetensors 1000 2";
  k.device = "cpu";
  k.machine = "Some CPU +avx2";
  k.threads = 8;
  k.dtype = "f32";
  k.page_size = 16;
  k.taps = {1, 3};
  k.max_rows = 8;
  k.width = 5;
  k.budget_s = 1.0;
  return k;
}

VerifyCostProfile some_profile() {
  VerifyCostProfile p;
  p.points = {{1, 9.5}, {2, 10.25}, {4, 12.0}};
  p.forwards = 12;
  p.seconds = 0.3;
  return p;
}

struct Lines {
  std::vector<std::string> lines;
  CacheLog log() {
    return [this](std::string_view l) { lines.emplace_back(l); };
  }
};

TEST(VerifyCostCache, HitOnTheSameKeyMissOnAnyChangedField) {
  TempDir dir;
  Lines out;
  const VerifyCostKey key = base_key();
  EXPECT_FALSE(load_verify_cost(dir.path(), key, out.log()));  // empty cache: a silent miss
  ASSERT_TRUE(store_verify_cost(dir.path() / "sub", key, some_profile(), out.log()));
  const auto hit = load_verify_cost(dir.path() / "sub", key, out.log());
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->points, some_profile().points);
  EXPECT_EQ(hit->loaded_from, verify_cost_cache_file(dir.path() / "sub", key).string());
  EXPECT_NE(describe(*hit).find("verify cost loaded from " + hit->loaded_from), std::string::npos);

  const std::vector<std::function<void(VerifyCostKey&)>> changes = {
      [](VerifyCostKey& k) { k.format += 1; },
      [](VerifyCostKey& k) { k.build = "/usr/bin/dspark: 101 1"; },
      [](VerifyCostKey& k) { k.model += "x"; },
      [](VerifyCostKey& k) { k.device = "cuda:0"; },
      [](VerifyCostKey& k) { k.machine = "Other CPU +avx2"; },
      [](VerifyCostKey& k) { k.threads = 4; },
      [](VerifyCostKey& k) { k.dtype = "bf16"; },
      [](VerifyCostKey& k) { k.cuda_graphs = true; },
      [](VerifyCostKey& k) { k.page_size = 32; },
      [](VerifyCostKey& k) {
        k.taps = {1, 2};
      },
      [](VerifyCostKey& k) { k.max_rows = 16; },
      [](VerifyCostKey& k) { k.width = 6; },
      [](VerifyCostKey& k) { k.budget_s = 2.0; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    VerifyCostKey k = base_key();
    changes[i](k);
    EXPECT_FALSE(k == key) << i;
    EXPECT_FALSE(load_verify_cost(dir.path() / "sub", k, out.log())) << "change " << i;
    EXPECT_NE(verify_cost_cache_file(dir.path(), k), verify_cost_cache_file(dir.path(), key)) << i;
  }
  // A file under this key's name holding another key (a hash collision): a miss, not its points.
  VerifyCostKey other = base_key();
  other.threads = 2;
  nlohmann::json j = {{"key", other.to_json()}, {"points", {{1, 1.0}, {2, 2.0}}}};
  write_file(verify_cost_cache_file(dir.path() / "sub", key), j.dump());
  EXPECT_FALSE(load_verify_cost(dir.path() / "sub", key, out.log()));
  EXPECT_TRUE(out.lines.empty()) << out.lines.front();  // misses are silent
}

TEST(VerifyCostCache, CorruptFilesAreReportedAndIgnored) {
  TempDir dir;
  const VerifyCostKey key = base_key();
  const fs::path file = verify_cost_cache_file(dir.path(), key);
  const nlohmann::json good_key = key.to_json();
  const std::vector<std::string> bodies = {
      "{not json",
      "",
      "[1, 2]",
      nlohmann::json({{"key", good_key}}).dump(),
      nlohmann::json({{"key", good_key}, {"points", nlohmann::json::array()}}).dump(),
      nlohmann::json({{"key", good_key}, {"points", {{2, 1.0}, {1, 2.0}}}}).dump(),
      nlohmann::json({{"key", good_key}, {"points", {{1, -1.0}}}}).dump(),
      nlohmann::json({{"key", good_key}, {"points", {{1, "fast"}}}}).dump(),
  };
  for (const std::string& body : bodies) {
    write_file(file, body);
    Lines out;
    EXPECT_FALSE(load_verify_cost(dir.path(), key, out.log())) << body;
    ASSERT_EQ(out.lines.size(), 1u) << body;
    EXPECT_NE(out.lines[0].find("ignoring the verify cost cache file " + file.string()),
              std::string::npos)
        << out.lines[0];
  }
  // Rewritten over the corrupt one: found again.
  Lines out;
  ASSERT_TRUE(store_verify_cost(dir.path(), key, some_profile(), out.log()));
  EXPECT_TRUE(load_verify_cost(dir.path(), key, out.log()));
  EXPECT_EQ(count_files(dir.path()), 1);  // no temporary file left
  EXPECT_TRUE(out.lines.empty());
}

TEST(VerifyCostCache, UnwritableDirectoryIsReportedOnce) {
  TempDir dir;
  write_file(dir.path() / "file", "x");
  Lines out;
  // A directory below a regular file cannot be created, whoever runs the test.
  EXPECT_FALSE(
      store_verify_cost(dir.path() / "file" / "cache", base_key(), some_profile(), out.log()));
  ASSERT_EQ(out.lines.size(), 1u);
  EXPECT_NE(out.lines[0].find("cannot write the verify cost cache in"), std::string::npos);
  EXPECT_FALSE(load_verify_cost(dir.path() / "file" / "cache", base_key(), out.log()));
  EXPECT_EQ(out.lines.size(), 1u);
}

TEST(VerifyCostCache, ModelIdentityFollowsTheWeightFiles) {
  TempDir dir;
  const fs::path m = dir.path() / "model";
  fs::create_directories(m);
  write_file(m / "config.json", "{}");
  write_file(m / "model.safetensors", "0123456789");
  const std::string id = model_identity(m);
  EXPECT_NE(id.find(fs::canonical(m).string()), std::string::npos) << id;
  EXPECT_NE(id.find("model.safetensors 10 "), std::string::npos) << id;
  EXPECT_EQ(model_identity(m), id);
  // Files the forward does not read leave it alone.
  write_file(m / "tokenizer.json", "{}");
  write_file(m / "README.md", "hello");
  EXPECT_EQ(model_identity(m), id);
  // Another path to the same directory: the same identity.
  EXPECT_EQ(model_identity(m / ".." / "model"), id);
  // A weight file rewritten with the same size: its modification time differs.
  const auto t = fs::last_write_time(m / "model.safetensors");
  write_file(m / "model.safetensors", "9876543210");
  fs::last_write_time(m / "model.safetensors", t + std::chrono::seconds(5));
  const std::string touched = model_identity(m);
  EXPECT_NE(touched, id);
  write_file(m / "model.safetensors", "01234567890");  // another size
  EXPECT_NE(model_identity(m), touched);
  const std::string before_shard = model_identity(m);
  write_file(m / "model-00002-of-00002.safetensors", "x");  // a new shard
  EXPECT_NE(model_identity(m), before_shard);
  const std::string before_config = model_identity(m);
  write_file(m / "config.json", "{\"a\": 1}");
  EXPECT_NE(model_identity(m), before_config);
  // A single-file checkpoint (GGUF).
  write_file(dir.path() / "m.gguf", "GGUF");
  EXPECT_NE(model_identity(dir.path() / "m.gguf").find("m.gguf: 4 "), std::string::npos);
}

TEST(VerifyCostCache, DefaultDirectoryFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(default_verify_cost_cache_dir(), fs::path("/x/cache/dspark/verify-cost"));
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(default_verify_cost_cache_dir(), fs::path("/home/u/.cache/dspark/verify-cost"));
  unsetenv("HOME");
  EXPECT_TRUE(default_verify_cost_cache_dir().empty());
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) setenv("HOME", saved_home.c_str(), 1);
}

fs::path qwen3_dir() {
  return test::data_dir() / "models" / "qwen3";
}

// The adaptive engine with an n-gram source (cheap; the verify profile is the target's).
struct EngineRun {
  std::vector<std::string> log;
  VerifyCostProfile profile;
  std::vector<std::vector<int32_t>> tokens;
};

EngineRun run_engine(Model& target, Context& ctx, const fs::path& cache_dir, int gamma,
                     bool generate_tokens = false, int max_tokens = 24) {
  EngineRun r;
  SpecConfig cfg;
  cfg.gamma = gamma;
  cfg.draft_policy = DraftPolicy::adaptive;
  cfg.max_rows = 2;
  cfg.profile_budget_s = 0;  // the two smallest batches
  cfg.cost_cache.dir = cache_dir;
  cfg.cost_cache.model = qwen3_dir();
  cfg.log = [&r](std::string_view l) { r.log.emplace_back(l); };
  NgramSource source(NgramConfig{1, 3});
  if (generate_tokens) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.eos_token_ids = {};
    std::vector<RequestInput> reqs;
    for (int i = 0; i < 2; ++i) {
      std::vector<int32_t> p;
      for (int t = 0; t < 12; ++t) p.push_back((3 * t % 7 + 5 * i + 1) % 50);
      reqs.push_back(RequestInput{p, o, nullptr, {}});
    }
    for (const auto& out : generate_speculative(target, ctx, &source, std::move(reqs), cfg))
      r.tokens.push_back(out.result.tokens);
    return r;
  }
  SpeculativeEngine engine(target, ctx, &source, cfg, 256);
  EXPECT_TRUE(engine.adaptive());
  r.profile = engine.verify_profile();
  return r;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

TEST(VerifyCostCache, EngineLoadsWhatAnEarlierEngineMeasured) {
  if (!fs::exists(qwen3_dir() / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(qwen3_dir(), Device::cpu(), DType::f32);
  TempDir dir;
  const fs::path cache = dir.path() / "verify-cost";

  const EngineRun first = run_engine(*target, ctx, cache, 4);
  EXPECT_TRUE(first.profile.loaded_from.empty());
  EXPECT_GT(first.profile.forwards, 0);
  EXPECT_TRUE(mentions(first.log, "verify cost profiled in"));
  ASSERT_EQ(count_files(cache), 1);

  const EngineRun second = run_engine(*target, ctx, cache, 4);
  ASSERT_FALSE(second.profile.loaded_from.empty());
  EXPECT_EQ(second.profile.forwards, 0);  // nothing run
  EXPECT_EQ(second.profile.points, first.profile.points);
  EXPECT_TRUE(mentions(second.log, "verify cost loaded from " + second.profile.loaded_from));
  const fs::path file = second.profile.loaded_from;
  EXPECT_EQ(file.parent_path(), cache);
  // The file names what it was measured for.
  const nlohmann::json stored = nlohmann::json::parse(std::ifstream(file));
  EXPECT_EQ(stored["key"]["width"], 5);
  EXPECT_EQ(stored["key"]["max_rows"], 2);
  EXPECT_EQ(stored["key"]["device"], "cpu");
  EXPECT_EQ(stored["key"]["dtype"], "f32");
  EXPECT_EQ(stored["key"]["threads"], ctx.pool().size());
  EXPECT_NE(stored["key"]["model"].get<std::string>().find("model.safetensors"), std::string::npos);

  // Another width (gamma): a miss, measured and stored beside the first.
  const EngineRun wider = run_engine(*target, ctx, cache, 3);
  EXPECT_TRUE(wider.profile.loaded_from.empty());
  EXPECT_EQ(count_files(cache), 2);

  // A corrupt file: one line, measured again, rewritten, then loaded.
  write_file(file, "{\"key\": ");
  const EngineRun after_corrupt = run_engine(*target, ctx, cache, 4);
  EXPECT_TRUE(after_corrupt.profile.loaded_from.empty());
  EXPECT_TRUE(mentions(after_corrupt.log, "ignoring the verify cost cache file " + file.string()));
  EXPECT_TRUE(mentions(after_corrupt.log, "verify cost profiled in"));
  const EngineRun reloaded = run_engine(*target, ctx, cache, 4);
  EXPECT_EQ(reloaded.profile.loaded_from, file.string());
  EXPECT_EQ(count_files(cache), 2);

  // An unwritable cache directory: one line, the engine runs on.
  write_file(dir.path() / "plain_file", "x");
  const EngineRun unwritable = run_engine(*target, ctx, dir.path() / "plain_file" / "c", 4);
  EXPECT_TRUE(mentions(unwritable.log, "cannot write the verify cost cache"));
  EXPECT_FALSE(unwritable.profile.points.empty());
}

// A cached profile whose times the rounds beat by far (measured on a busy machine) is dropped when
// the engine ends, so that the next start profiles again; one the rounds do not beat stays.
TEST(VerifyCostCache, ProfileTheRoundsBeatIsDropped) {
  if (!fs::exists(qwen3_dir() / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(qwen3_dir(), Device::cpu(), DType::f32);
  TempDir dir;
  const fs::path cache = dir.path() / "verify-cost";
  run_engine(*target, ctx, cache, 4);
  ASSERT_EQ(count_files(cache), 1);
  const fs::path file = fs::directory_iterator(cache)->path();
  const nlohmann::json measured = nlohmann::json::parse(std::ifstream(file));
  auto store_scaled = [&](double factor) {
    nlohmann::json j = measured;
    for (auto& point : j["points"]) point[1] = point[1].get<double>() * factor;
    write_file(file, j.dump());
  };
  // 160 tokens per row, gamma 4: at least 32 rounds, enough for the engine to judge the profile.
  store_scaled(1e3);
  const EngineRun slow = run_engine(*target, ctx, cache, 4, true, 160);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(mentions(slow.log, "verify cost profile " + file.string() + " dropped"));
  store_scaled(1e-3);
  const EngineRun fast = run_engine(*target, ctx, cache, 4, true, 160);
  EXPECT_TRUE(fs::exists(file));
  EXPECT_FALSE(mentions(fast.log, "dropped"));
  EXPECT_EQ(fast.tokens, slow.tokens);
}

TEST(VerifyCostCache, EngineWithoutTheCacheWritesNothing) {
  if (!fs::exists(qwen3_dir() / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(qwen3_dir(), Device::cpu(), DType::f32);
  TempDir dir;
  // Even with a default location available, an empty directory means no cache.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  const EngineRun r = run_engine(*target, ctx, {}, 4);
  if (xdg)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
  EXPECT_TRUE(r.profile.loaded_from.empty());
  EXPECT_GT(r.profile.forwards, 0);
  EXPECT_EQ(count_files(dir.path()), 0);
}

TEST(VerifyCostCache, GreedyOutputIsTheSameWithAndWithoutTheCache) {
  if (!fs::exists(qwen3_dir() / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(qwen3_dir(), Device::cpu(), DType::f32);
  TempDir dir;
  const EngineRun without = run_engine(*target, ctx, {}, 4, true);
  const EngineRun measured = run_engine(*target, ctx, dir.path(), 4, true);
  const EngineRun loaded = run_engine(*target, ctx, dir.path(), 4, true);
  EXPECT_TRUE(mentions(measured.log, "verify cost profiled in"));
  EXPECT_TRUE(mentions(loaded.log, "verify cost loaded from"));
  ASSERT_EQ(without.tokens.size(), 2u);
  EXPECT_EQ(measured.tokens, without.tokens);
  EXPECT_EQ(loaded.tokens, without.tokens);
  for (const auto& t : without.tokens) EXPECT_EQ(t.size(), 24u);
}

}  // namespace
}  // namespace dspark
