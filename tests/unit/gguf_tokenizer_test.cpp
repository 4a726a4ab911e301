// Tokenizers from GGUF metadata.
// - tiny_llama.gguf carries the tiny Llama 3 fixture's byte-level BPE as tokenizer.ggml.* (gpt2,
//   pre "llama-bpe"); it must encode/decode exactly like the fixture's tokenizer.json (which
//   tokenizer_parity_test checks against Hugging Face tokenizers).
// - When models/SmolLM2-135M-Instruct.Q4_1.gguf exists: ids and decoded text equal those of
//   Hugging Face tokenizers (tests/data/gguf/smollm2_tokenizer_golden.json, written by
//   tools/gguf/make_fixtures.py from the file's vocabulary/merges with SmolLM2's pipeline).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/io/chat_template.h"
#include "dspark/io/gguf.h"
#include "dspark/io/tokenizer.h"

namespace dspark {
namespace {

using test::gguf_dir;

TEST(GgufTokenizer, TinyLlamaMatchesTokenizerJson) {
  const GgufFile g = GgufFile::open(gguf_dir() / "tiny_llama.gguf");
  const Tokenizer from_gguf = Tokenizer::from_gguf(g);
  const Tokenizer from_json = Tokenizer::from_file(test::data_dir() / "models" / "llama3");
  EXPECT_EQ(from_gguf.vocab_size(), from_json.vocab_size());
  const std::vector<std::string> texts = {
      "Hello world",
      "  spaces  and\ttabs\n\nnewlines",
      "numbers 1234567 and 3.14",
      "unicode: caf\xc3\xa9 \xe5\x8c\x97\xe4\xba\xac \xf0\x9f\x98\x80",
      "don't I'm they've",
      "<|begin_of_text|>special tokens<|end_of_text|>",
      ""};
  for (const std::string& t : texts) {
    const std::vector<int32_t> want = from_json.encode(t, false);
    EXPECT_EQ(from_gguf.encode(t, false), want) << t;
    EXPECT_EQ(from_gguf.decode(want), from_json.decode(want)) << t;
    EXPECT_EQ(from_gguf.decode(want, true), from_json.decode(want, true)) << t;
  }
  for (int32_t id = 0; id < from_json.vocab_size(); ++id) {
    ASSERT_EQ(from_gguf.id_to_token(id), from_json.id_to_token(id)) << id;
    ASSERT_EQ(from_gguf.is_special(id), from_json.is_special(id)) << id;
  }
}

TEST(GgufTokenizer, UnsupportedPreTokenizerIsAnError) {
  // dequant.gguf has no tokenizer at all: a missing-key io error naming the key.
  const GgufFile g = GgufFile::open(gguf_dir() / "dequant.gguf");
  try {
    (void)Tokenizer::from_gguf(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
  }
}

TEST(GgufTokenizer, SmolLM2MatchesHuggingFace) {
  const char* env = std::getenv("DSPARK_SMOLLM2_GGUF");
  const std::filesystem::path path =
      env ? env : test::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) {
    std::cout << "SKIPPED: " << path << " not found (scripts/fetch_default_model.sh)\n";
    GTEST_SKIP() << path << " not found";
  }
  const GgufFile g = GgufFile::open(path);
  const Tokenizer tok = Tokenizer::from_gguf(g);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.bos_id(), 1);
  std::ifstream in(gguf_dir() / "smollm2_tokenizer_golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  int n = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, false), want) << text;
    // add_bos_token is false in this file: add_special_tokens changes nothing.
    EXPECT_EQ(tok.encode(text, true), want) << text;
    EXPECT_EQ(tok.decode(want, false), c.at("decoded").get<std::string>()) << text;
    EXPECT_EQ(tok.decode(want, true), c.at("decoded_skip_special").get<std::string>()) << text;
    ++n;
  }
  EXPECT_GE(n, 10);

  // The chat template renders through our Jinja implementation.
  const std::string source = gguf_chat_template(g);
  ASSERT_FALSE(source.empty());
  const ChatTemplate tmpl = ChatTemplate::from_string(source);
  const std::string text =
      tmpl.render(nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}}), true);
  EXPECT_EQ(text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace dspark
