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

}  // namespace dspark::cli
