// The dspark subcommands. Each add_*_command registers its options on the app and returns the
// function that runs it after parsing (returning the process exit code).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dspark::cli {

inline constexpr const char* kVersion = "0.1.0";

using Command = std::function<int()>;

Command add_generate_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_demo_command(CLI::App& app);
Command add_regen_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_perplexity_command(CLI::App& app);

// --spec-sampling NAME (coupled or rejection; engine/spec_sampling.h) into `value`.
inline CLI::Option* add_spec_sampling_option(CLI::App* sub, std::string& value) {
  return sub
      ->add_option("--spec-sampling", value,
                   "How sampled requests verify drafts: coupled (the same seed gives the same text "
                   "as without a drafter) or rejection (speculative sampling: often more drafts "
                   "accepted, but the text depends on the drafter)")
      ->check(CLI::IsMember({"coupled", "rejection"}))
      ->capture_default_str();
}

// --exact (Tuning::batch_invariant, backend/cuda/policy/device.h) into `value`.
inline CLI::Option* add_exact_option(CLI::App* sub, bool& value) {
  return sub->add_flag(
      "--exact", value,
      "CUDA: batch-invariant numerics: a token's logits no longer depend on the other rows of its "
      "forward, so speculative output equals plain output bit for bit (greedy, and sampled with "
      "--spec-sampling coupled) at any batch; costs speed (docs/spec-decoding.md). The CPU "
      "ignores it");
}

// --draft-policy (spec/draft_length.h): adaptive (the default) or fixed.
inline CLI::Option* add_draft_policy_option(CLI::App* sub, std::string& value) {
  return sub
      ->add_option("--draft-policy", value,
                   "Draft length per row and round: adaptive (from the verify cost profiled at "
                   "start-up and each row's recent acceptance; 0 drafts when drafting does not "
                   "pay) or fixed (always up to --gamma)")
      ->check(CLI::IsMember({"adaptive", "fixed"}))
      ->capture_default_str();
}

}  // namespace dspark::cli
