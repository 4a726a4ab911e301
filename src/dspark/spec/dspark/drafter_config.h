// Block drafter checkpoints (DFlash backbone, with or without the DSpark heads): the three
// published config.json layouts, detected from `architectures`:
//
//   deepspec   `Qwen3DSparkModel` (deepseek-ai/DeepSpec): block_size, mask_token_id,
//              target_layer_ids, num_target_layers, markov_rank, markov_head_type,
//              enable_confidence_head, confidence_head_with_markov at the top level;
//   specforge  `DSparkDraftModel` (sgl-project/SpecForge): the same fields nested under
//              `dflash_config`, with `projector_type: "dspark"`;
//   dflash     `DFlashDraftModel` (z-lab): `dflash_config.{mask_token_id, target_layer_ids}`,
//              top-level block_size; no Markov head and no confidence head.
//
// Block row convention (how each family was trained): the block is [anchor, mask x (L-1)] at
// positions P..P+L-1 (P = committed length). DSpark (deepspec, specforge) row k predicts the token
// at P+k+1, so a block of L rows gives L drafts; z-lab DFlash row k >= 1 predicts the token at its
// own position P+k and row 0 is unused, so a block of L rows gives L-1 drafts.
// The backbone geometry (hidden size, heads, RoPE, norms) is read with the Qwen3 rules of
// model/config.h (the drafters are Qwen3-style layers with per-head q/k norms).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/model/config.h"

namespace dspark {

enum class DrafterLayout { deepspec, specforge, dflash };
enum class MarkovHeadType { none, vanilla, gated, rnn };

std::string_view drafter_layout_name(DrafterLayout layout);
std::string_view markov_head_name(MarkovHeadType type);

struct DrafterConfig {
  DrafterLayout layout = DrafterLayout::deepspec;
  std::string architecture;  // as written in config.json
  ModelConfig backbone;      // drafter geometry (hidden_size d, heads, rope, eps, windows, vocab)
  int block_size = 0;        // trained block length L (rows per block)
  int mask_token_id = -1;
  std::vector<int> target_layer_ids;  // model/model.h tap convention (-1 = embedding output)
  int num_target_layers = -1;         // -1 when the config does not say
  int markov_rank = 0;                // r; 0 = no Markov head
  MarkovHeadType markov_head = MarkovHeadType::none;
  bool confidence_head = false;
  bool confidence_with_markov = false;  // confidence features [h ; w1[prev]] instead of h

  // Block row of draft 0 (0 for DSpark, 1 for DFlash), and drafts per block of `rows` rows.
  int draft_row_offset() const { return layout == DrafterLayout::dflash ? 1 : 0; }
  int drafts_per_block(int rows) const { return rows - draft_row_offset(); }
  bool has_dspark_heads() const { return markov_head != MarkovHeadType::none || confidence_head; }
};

// Parses a drafter config.json (`source` names it in errors). Throws io / unsupported naming the
// key, e.g. "config.json: DSparkDraftModel needs dflash_config.projector_type 'dspark'".
DrafterConfig parse_drafter_config(const nlohmann::json& json, std::string_view source);
DrafterConfig load_drafter_config(const std::filesystem::path& dir);

// True when dir/config.json names one of the three drafter architectures (never throws).
bool is_block_drafter_dir(const std::filesystem::path& dir);

// DFlash's default taps when a config gives none: layer N/2 for one draft layer, else spread
// evenly (rounded) from layer 1 to layer N-3.
std::vector<int> default_target_layer_ids(int num_target_layers, int num_draft_layers);

// Throws invalid_input with one line naming the first mismatch between the drafter and the
// target: vocabulary size, hidden size (when the drafter uses the target's embedding or LM head),
// number of target layers, tap ids out of range (including the target's last layer) or not
// strictly increasing, mask token id.
void check_drafter_fits(const DrafterConfig& drafter, const ModelConfig& target,
                        bool uses_target_embedding, bool uses_target_lm_head);

}  // namespace dspark
