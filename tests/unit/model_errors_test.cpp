// load_model and forward failure modes: unknown architectures, weights that do not match the
// config, a full KV cache, bad batches; and the no-allocation-per-step property of forward.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/model/model.h"
#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return test::golden_models_dir() / name;
}

// A scratch copy of a fixture whose config.json is edited by `edit`.
class EditedFixture {
 public:
  EditedFixture(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    dir_ = fs::temp_directory_path() /
           fmt::format("dspark_model_errors_{}_{}_{}", name, ::getpid(), counter_++);
    fs::remove_all(dir_);
    fs::copy(fixture(name), dir_, fs::copy_options::recursive);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
    edit(config);
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  ~EditedFixture() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  static inline int counter_ = 0;
};

ErrorKind kind_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no dspark::Error thrown";
  return ErrorKind::internal;
}

class ModelErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fixture("qwen3"))) GTEST_SKIP() << "no fixtures";
  }
};

TEST_F(ModelErrors, MissingDirectory) {
  std::string msg;
  EXPECT_EQ(kind_of([] { load_model("/nonexistent/model", Device::cpu(), DType::f32); }, &msg),
            ErrorKind::io);
  EXPECT_NE(msg.find("/nonexistent/model"), std::string::npos) << msg;
}

TEST_F(ModelErrors, UnknownArchitectureNamesTheSupportedOnes) {
  EditedFixture f("qwen3", [](nlohmann::json& c) { c["architectures"] = {"GPT2LMHeadModel"}; });
  std::string msg;
  EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg),
            ErrorKind::unsupported);
  EXPECT_NE(msg.find("GPT2LMHeadModel"), std::string::npos) << msg;
  for (const std::string& a : supported_architectures()) {
    EXPECT_NE(msg.find(a), std::string::npos) << msg;
  }
}

TEST_F(ModelErrors, ShapeMismatchNamesTheTensor) {
  // intermediate_size 100 in the config, 160 in the weights: the first MLP weight is named.
  EditedFixture f("qwen3", [](nlohmann::json& c) { c["intermediate_size"] = 100; });
  std::string msg;
  EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg), ErrorKind::io);
  EXPECT_NE(msg.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;
}

TEST_F(ModelErrors, MissingTensorIsNamed) {
  // Untied config on a tied checkpoint (qwen2 ties): lm_head.weight is missing.
  EditedFixture f("qwen2", [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  std::string msg;
  EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg), ErrorKind::io);
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
}

TEST_F(ModelErrors, MoeExpertsThatDoNotMatchTheConfigAreNamed) {
  if (!fs::exists(fixture("qwen3_moe"))) GTEST_SKIP() << "no qwen3_moe fixture";
  std::string msg;
  {
    // moe_intermediate_size 16 in the config, 32 in the weights: the first expert is named.
    EditedFixture f("qwen3_moe", [](nlohmann::json& c) { c["moe_intermediate_size"] = 16; });
    EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg),
              ErrorKind::io);
    EXPECT_NE(msg.find("model.layers.0.mlp.experts.0.gate_proj.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[16, 64]"), std::string::npos) << msg;
  }
  {
    // 9 experts in the config, 8 in the checkpoint: expert 8 is missing.
    EditedFixture f("qwen3_moe", [](nlohmann::json& c) {
      c.erase("num_local_experts");
      c["num_experts"] = 9;
    });
    EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg),
              ErrorKind::io);
    EXPECT_NE(msg.find("mlp.gate.weight"), std::string::npos) << msg;  // the router: [9, 64]
  }
  {
    // Layer 1 declared MoE but stored dense: its router is missing.
    EditedFixture f("qwen3_moe",
                    [](nlohmann::json& c) { c["mlp_only_layers"] = nlohmann::json::array(); });
    EXPECT_EQ(kind_of([&] { load_model(f.dir(), Device::cpu(), DType::f32); }, &msg),
              ErrorKind::io);
    EXPECT_NE(msg.find("model.layers.1.mlp.gate.weight"), std::string::npos) << msg;
  }
}

TEST_F(ModelErrors, FullCacheAndBadBatchesChangeNothing) {
  Context ctx(Device::cpu());
  auto model = load_model(fixture("qwen3"), Device::cpu(), DType::f32);
  PagedKvCache kv(model->kv_shape(4, 2), Device::cpu());
  const SeqId s = kv.create_sequence();
  ForwardBatch b;
  b.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 9 tokens > 2 pages of 4
  b.row_indptr = {0, 9};
  b.seqs = {s};
  b.logit_indices = {8};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::out_of_memory);
  EXPECT_EQ(kv.length(s), 0);
  EXPECT_EQ(kv.free_pages(), 2);

  b.tokens = {1, 2, model->config().vocab_size};
  b.row_indptr = {0, 3};
  b.logit_indices = {2};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::invalid_input);
  b.tokens = {1, 2, 3};
  b.logit_indices = {3};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::invalid_input);
  b.logit_indices = {2};
  b.row_indptr = {0, 2};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::invalid_input);
  b.row_indptr = {0, 3};
  b.seqs = {s + 7};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::invalid_input);
  b.seqs = {s};
  b.tap_layers = {model->config().num_layers};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, kv, b); }), ErrorKind::invalid_input);
  EXPECT_EQ(kv.length(s), 0);
  EXPECT_EQ(kv.free_pages(), 2);

  // A cache of the wrong shape is refused.
  KvCacheShape other = model->kv_shape(4, 2);
  other.head_dim += 2;
  PagedKvCache wrong(other, Device::cpu());
  b.tap_layers.clear();
  b.seqs = {wrong.create_sequence()};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, wrong, b); }), ErrorKind::invalid_input);
}

// An MLA model needs its latent cache: one shared K/V pool of width kv_lora_rank + rope; a cache
// with separate K and V pools of the same shape is refused.
TEST_F(ModelErrors, MlaRefusesACacheWithoutSharedKv) {
  Context ctx(Device::cpu());
  auto model = load_model(fixture("deepseek_v3"), Device::cpu(), DType::f32);
  const KvCacheShape latent = model->kv_shape(4, 2);
  EXPECT_TRUE(latent.shared_kv);
  EXPECT_EQ(latent.num_kv_heads, 1);
  EXPECT_EQ(latent.head_dim, 32 + 8);
  KvCacheShape separate = latent;
  separate.shared_kv = false;
  PagedKvCache wrong(separate, Device::cpu());
  ForwardBatch b;
  b.tokens = {1, 2, 3};
  b.row_indptr = {0, 3};
  b.seqs = {wrong.create_sequence()};
  b.logit_indices = {2};
  EXPECT_EQ(kind_of([&] { model->forward(ctx, wrong, b); }), ErrorKind::invalid_input);
  PagedKvCache right(latent, Device::cpu());
  b.seqs = {right.create_sequence()};
  EXPECT_NO_THROW(model->forward(ctx, right, b));
}

TEST_F(ModelErrors, DecodeStepsDoNotAllocate) {
  Context ctx(Device::cpu());
  auto model = load_model(fixture("qwen3"), Device::cpu(), DType::f32);
  PagedKvCache kv(model->kv_shape(16, 8), Device::cpu());
  const SeqId s = kv.create_sequence();
  ForwardBatch prefill;
  prefill.tokens = {5, 6, 7, 8, 9, 10};
  prefill.row_indptr = {0, 6};
  prefill.seqs = {s};
  prefill.logit_indices = {5};
  model->forward(ctx, kv, prefill);
  ForwardBatch step;
  step.tokens = {11};
  step.row_indptr = {0, 1};
  step.seqs = {s};
  step.logit_indices = {0};
  model->forward(ctx, kv, step);
  const int64_t before = memory_stats(Device::cpu()).n_allocations;
  for (int i = 0; i < 10; ++i) model->forward(ctx, kv, step);
  EXPECT_EQ(memory_stats(Device::cpu()).n_allocations, before);
  EXPECT_EQ(kv.length(s), 17);
}

}  // namespace
}  // namespace dspark
