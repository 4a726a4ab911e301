// Draft vocabularies (DSparkSourceOptions::draft_vocab) as files: `--draft-vocab FILE`. The file
// is JSON, either an array of token ids or an object {"token_ids": [...]}, in any order (e.g. by
// decreasing frequency, as tools/train/make_draft_vocab.py writes it); it is read sorted and
// deduplicated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace dspark {

// The file's ids, sorted and unique (ErrorKind::io for a malformed or empty file).
std::vector<int32_t> read_draft_vocab(const std::filesystem::path& file);

// invalid_input unless `ids` is empty or sorted, unique and within [0, vocab_size).
void check_draft_vocab(std::span<const int32_t> ids, int64_t vocab_size);

}  // namespace dspark
