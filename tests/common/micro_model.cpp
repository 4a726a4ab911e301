#include "common/micro_model.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dspark/io/safetensors.h"
#include "test_util.h"

namespace dspark::test {

void write_micro_llama(const std::filesystem::path& dir, const MicroModelSpec& s) {
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"vocab_size", s.vocab},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.intermediate},
                        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"max_position_embeddings", 256},
                        {"tie_word_embeddings", false},
                        {"torch_dtype", "float32"},
                        {"bos_token_id", 0},
                        {"eos_token_id", s.vocab + 100}};  // never produced: no EOS
  std::ofstream(dir / "config.json") << cfg.dump(2);

  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint32_t seed = s.seed * 1000u;
  auto add = [&](const std::string& name, Shape shape, float stddev) {
    owned.push_back(random_tensor(DType::f32, shape, seed++, stddev));
    tensors.emplace_back(name, owned.back().view());
  };
  auto ones = [&](const std::string& name, int64_t n) {
    owned.push_back(make_tensor(std::vector<float>(static_cast<size_t>(n), 1.0f), DType::f32,
                                Shape{n}, Device::cpu()));
    tensors.emplace_back(name, owned.back().view());
  };
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("model.embed_tokens.weight", Shape{s.vocab, h}, 1.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ones(p + "input_layernorm.weight", h);
    ones(p + "post_attention_layernorm.weight", h);
    add(p + "self_attn.q_proj.weight", Shape{q, h}, s.std);
    add(p + "self_attn.k_proj.weight", Shape{kv, h}, s.std);
    add(p + "self_attn.v_proj.weight", Shape{kv, h}, s.std);
    add(p + "self_attn.o_proj.weight", Shape{h, q}, s.std);
    add(p + "mlp.gate_proj.weight", Shape{s.intermediate, h}, s.std);
    add(p + "mlp.up_proj.weight", Shape{s.intermediate, h}, s.std);
    add(p + "mlp.down_proj.weight", Shape{h, s.intermediate}, s.std);
  }
  ones("model.norm.weight", h);
  add("lm_head.weight", Shape{s.vocab, h}, s.std);
  write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace dspark::test
