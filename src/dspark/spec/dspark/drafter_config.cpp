#include "dspark/spec/dspark/drafter_config.h"

#include <cmath>
#include <optional>
#include <system_error>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"

namespace dspark {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kDeepSpec = "Qwen3DSparkModel";
constexpr std::string_view kSpecForge = "DSparkDraftModel";
constexpr std::string_view kDFlash = "DFlashDraftModel";

std::optional<DrafterLayout> layout_of(std::string_view architecture) {
  if (architecture == kDeepSpec) return DrafterLayout::deepspec;
  if (architecture == kSpecForge) return DrafterLayout::specforge;
  if (architecture == kDFlash) return DrafterLayout::dflash;
  return std::nullopt;
}

std::vector<int> int_list(const json& obj, std::string_view key, std::string_view source) {
  const auto it = obj.find(key);
  DSPARK_CHECK_KIND(io, it != obj.end() && !it->is_null(), "{}: missing required key '{}'", source,
                    key);
  DSPARK_CHECK_KIND(io, it->is_array() && !it->empty(), "{}: key '{}' must be a non-empty list",
                    source, key);
  std::vector<int> out;
  for (const json& v : *it) {
    DSPARK_CHECK_KIND(io, v.is_number_integer(), "{}: key '{}' must hold integers, got {}", source,
                      key, json_brief(*it));
    out.push_back(v.get<int>());
  }
  return out;
}

MarkovHeadType parse_head_type(const std::string& name, std::string_view source) {
  if (name == "vanilla") return MarkovHeadType::vanilla;
  if (name == "gated") return MarkovHeadType::gated;
  if (name == "rnn") return MarkovHeadType::rnn;
  DSPARK_FAIL(unsupported, "{}: markov_head_type '{}' is not supported (vanilla, gated, rnn)",
              source, name);
}

// The drafter geometry with the Qwen3 rules (the drafters' layers are Qwen3 decoder layers).
ModelConfig parse_backbone(const json& j) {
  json copy = j;
  copy["architectures"] = json::array({"Qwen3ForCausalLM"});
  return parse_model_config(copy);
}

// The fields shared by the DSpark layouts, read from `fields` (the top level or dflash_config).
void parse_dspark_heads(const json& fields, std::string_view source, bool deepspec,
                        DrafterConfig& c) {
  const int64_t rank = deepspec ? json_int(fields, "markov_rank", source)
                                : json_optional_int(fields, "markov_rank", source).value_or(0);
  DSPARK_CHECK_KIND(io, rank >= 0 && rank <= (1 << 20), "{}: markov_rank must be >= 0, got {}",
                    source, rank);
  c.markov_rank = static_cast<int>(rank);
  if (c.markov_rank > 0) {
    const std::optional<std::string> type =
        json_optional_string(fields, "markov_head_type", source);
    DSPARK_CHECK_KIND(io, type.has_value() || !deepspec,
                      "{}: missing required key 'markov_head_type' (markov_rank > 0)", source);
    c.markov_head = parse_head_type(type.value_or("vanilla"), source);
  }
  if (deepspec) {
    c.confidence_head =
        json_optional_bool(fields, "enable_confidence_head", source).value_or(false);
    DSPARK_CHECK_KIND(io, fields.contains("enable_confidence_head"),
                      "{}: missing required key 'enable_confidence_head'", source);
  } else {
    const double alpha =
        json_optional_number(fields, "confidence_head_alpha", source).value_or(0.0);
    c.confidence_head =
        json_optional_bool(fields, "enable_confidence_head", source).value_or(alpha > 0.0);
  }
  if (c.confidence_head) {
    const std::optional<bool> with =
        json_optional_bool(fields, "confidence_head_with_markov", source);
    DSPARK_CHECK_KIND(io, with.has_value() || !deepspec,
                      "{}: missing required key 'confidence_head_with_markov'", source);
    c.confidence_with_markov = with.value_or(false);
    DSPARK_CHECK_KIND(io, !c.confidence_with_markov || c.markov_rank > 0,
                      "{}: confidence_head_with_markov needs markov_rank > 0", source);
  }
}

}  // namespace

std::string_view drafter_layout_name(DrafterLayout layout) {
  switch (layout) {
    case DrafterLayout::deepspec:
      return "deepspec";
    case DrafterLayout::specforge:
      return "specforge";
    case DrafterLayout::dflash:
      return "dflash";
  }
  return "?";
}

std::string_view markov_head_name(MarkovHeadType type) {
  switch (type) {
    case MarkovHeadType::none:
      return "none";
    case MarkovHeadType::vanilla:
      return "vanilla";
    case MarkovHeadType::gated:
      return "gated";
    case MarkovHeadType::rnn:
      return "rnn";
  }
  return "?";
}

std::vector<int> default_target_layer_ids(int num_target_layers, int num_draft_layers) {
  if (num_draft_layers == 1) return {num_target_layers / 2};
  const double start = 1, end = num_target_layers - 3, span = end - start;
  std::vector<int> ids;
  for (int i = 0; i < num_draft_layers; ++i) {
    // Python's round(): ties to even, which nearbyint does in the default rounding mode.
    ids.push_back(static_cast<int>(std::nearbyint(start + i * span / (num_draft_layers - 1))));
  }
  return ids;
}

DrafterConfig parse_drafter_config(const json& j, std::string_view source) {
  DSPARK_CHECK_KIND(io, j.is_object(), "{}: expected a JSON object, got {}", source, json_brief(j));
  const auto archs = j.find("architectures");
  DSPARK_CHECK_KIND(
      io, archs != j.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string(),
      "{}: key 'architectures' must be a non-empty list of strings", source);
  DrafterConfig c;
  c.architecture = (*archs)[0].get<std::string>();
  const std::optional<DrafterLayout> layout = layout_of(c.architecture);
  DSPARK_CHECK_KIND(unsupported, layout.has_value(),
                    "{}: architecture '{}' is not a block drafter (supported: {}, {}, {})", source,
                    c.architecture, kDeepSpec, kSpecForge, kDFlash);
  c.layout = *layout;
  c.backbone = parse_backbone(j);

  const json empty = json::object();
  const json* fields = &j;
  if (c.layout != DrafterLayout::deepspec) {
    const auto it = j.find("dflash_config");
    DSPARK_CHECK_KIND(io, it == j.end() || it->is_null() || it->is_object(),
                      "{}: key 'dflash_config' must be an object", source);
    fields = (it == j.end() || it->is_null()) ? &empty : &*it;
  }
  const std::string fsource = c.layout == DrafterLayout::deepspec
                                  ? std::string(source)
                                  : fmt::format("{} (dflash_config)", source);

  if (c.layout == DrafterLayout::specforge) {
    const std::string projector =
        json_optional_string(*fields, "projector_type", fsource).value_or("dspark");
    DSPARK_CHECK_KIND(unsupported, projector == "dspark",
                      "{}: DSparkDraftModel needs projector_type 'dspark', got '{}'", fsource,
                      projector);
  }
  c.block_size = static_cast<int>(json_int(j, "block_size", source));
  DSPARK_CHECK_KIND(io, c.block_size > c.draft_row_offset() && c.block_size <= 256,
                    "{}: block_size {} is out of range", source, c.block_size);
  c.mask_token_id = static_cast<int>(json_int(*fields, "mask_token_id", fsource));
  c.num_target_layers =
      static_cast<int>(json_optional_int(j, "num_target_layers", source).value_or(-1));
  if (fields->contains("target_layer_ids") && !(*fields)["target_layer_ids"].is_null()) {
    c.target_layer_ids = int_list(*fields, "target_layer_ids", fsource);
  } else {
    DSPARK_CHECK_KIND(io, c.layout != DrafterLayout::deepspec && c.num_target_layers > 0,
                      "{}: missing required key 'target_layer_ids'", fsource);
    c.target_layer_ids = default_target_layer_ids(c.num_target_layers, c.backbone.num_layers);
  }
  if (c.layout != DrafterLayout::dflash) {
    parse_dspark_heads(*fields, fsource, c.layout == DrafterLayout::deepspec, c);
  }
  return c;
}

DrafterConfig load_drafter_config(const fs::path& dir) {
  std::error_code ec;
  DSPARK_CHECK_KIND(io, fs::is_directory(dir, ec), "drafter directory '{}' does not exist",
                    dir.string());
  const fs::path file = dir / "config.json";
  return parse_drafter_config(read_json_file(file), file.string());
}

bool is_block_drafter_dir(const fs::path& dir) {
  try {
    std::error_code ec;
    if (!fs::is_regular_file(dir / "config.json", ec)) return false;
    const json j = read_json_file(dir / "config.json");
    if (!j.is_object()) return false;
    const auto archs = j.find("architectures");
    if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      return false;
    return layout_of((*archs)[0].get<std::string>()).has_value();
  } catch (const std::exception&) {
    return false;
  }
}

void check_drafter_fits(const DrafterConfig& d, const ModelConfig& t, bool uses_target_embedding,
                        bool uses_target_lm_head) {
  const ModelConfig& b = d.backbone;
  DSPARK_CHECK_KIND(invalid_input, b.vocab_size == t.vocab_size,
                    "drafter vocabulary ({} tokens) does not match the target's ({} tokens)",
                    b.vocab_size, t.vocab_size);
  if (uses_target_embedding || uses_target_lm_head) {
    DSPARK_CHECK_KIND(invalid_input, b.hidden_size == t.hidden_size,
                      "drafter hidden size {} does not match the target's hidden size {} (the "
                      "drafter uses the target's {})",
                      b.hidden_size, t.hidden_size,
                      uses_target_embedding ? "embedding" : "LM head");
  }
  DSPARK_CHECK_KIND(invalid_input, d.num_target_layers < 0 || d.num_target_layers == t.num_layers,
                    "drafter was trained for a target with {} layers, the target has {}",
                    d.num_target_layers, t.num_layers);
  for (size_t i = 0; i < d.target_layer_ids.size(); ++i) {
    const int id = d.target_layer_ids[i];
    DSPARK_CHECK_KIND(invalid_input, id >= -1 && id < t.num_layers,
                      "drafter tap layer {} (target_layer_ids {}) is outside [-1, {}) for the "
                      "target's {} layers",
                      id, fmt::format("{}", fmt::join(d.target_layer_ids, ",")), t.num_layers,
                      t.num_layers);
    // HF's hidden_states[L] (the last layer's "output") is final-normed, unlike every other
    // tap: drafters never train on it (DeepSpec asserts the same).
    DSPARK_CHECK_KIND(invalid_input, id != t.num_layers - 1,
                      "drafter tap layer {} is the target's last layer (its Hugging Face hidden "
                      "state is final-normed, unlike the others); not supported",
                      id);
    DSPARK_CHECK_KIND(invalid_input, i == 0 || id > d.target_layer_ids[i - 1],
                      "drafter target_layer_ids [{}] are not strictly increasing",
                      fmt::join(d.target_layer_ids, ", "));
  }
  DSPARK_CHECK_KIND(invalid_input, d.mask_token_id >= 0 && d.mask_token_id < t.vocab_size,
                    "drafter mask_token_id {} is outside the target's vocabulary [0, {})",
                    d.mask_token_id, t.vocab_size);
}

}  // namespace dspark
