#include "dspark/spec/dspark/draft_vocab.h"

#include <algorithm>
#include <limits>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"

namespace dspark {

std::vector<int32_t> read_draft_vocab(const std::filesystem::path& file) {
  const nlohmann::json j = read_json_file(file);
  const std::string source = file.string();
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    const auto it = j.find("token_ids");
    DSPARK_CHECK_KIND(io, it != j.end(), "{}: missing key 'token_ids' (a list of token ids)",
                      source);
    list = &*it;
  }
  DSPARK_CHECK_KIND(io, list->is_array() && !list->empty(),
                    "{}: expected a non-empty list of token ids", source);
  std::vector<int32_t> ids;
  ids.reserve(list->size());
  for (const nlohmann::json& v : *list) {
    DSPARK_CHECK_KIND(io,
                      v.is_number_integer() && v.get<int64_t>() >= 0 &&
                          v.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
                      "{}: token ids must be non-negative integers, got {}", source, v.dump());
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void check_draft_vocab(std::span<const int32_t> ids, int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    DSPARK_CHECK_KIND(invalid_input, ids[i] >= 0 && ids[i] < vocab_size,
                      "draft vocabulary: token id {} is outside the vocabulary of {}", ids[i],
                      vocab_size);
    DSPARK_CHECK_KIND(invalid_input, i == 0 || ids[i] > ids[i - 1],
                      "draft vocabulary: ids must be sorted and unique ({} follows {})", ids[i],
                      ids[i - 1]);
  }
}

}  // namespace dspark
