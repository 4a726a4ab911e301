// dspark: argument parsing and wiring only (the subcommands are in apps/dspark/*_command.cpp).
// Exit codes: 0 success, 2 usage errors (bad flags or values), 1 anything else. Every error is one
// line on stderr starting with "error: ".
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "dspark/core/error.h"

namespace {

void print_error(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dspark: fast, lossless speculative decoding for LLMs", "dspark"};
  app.set_version_flag("--version", std::string("dspark ") + dspark::cli::kVersion);
  app.require_subcommand(1);
  const std::vector<std::pair<CLI::App*, dspark::cli::Command>> commands = [&] {
    std::vector<std::pair<CLI::App*, dspark::cli::Command>> c;
    auto generate = dspark::cli::add_generate_command(app);
    c.emplace_back(app.get_subcommand("generate"), std::move(generate));
    auto info = dspark::cli::add_info_command(app);
    c.emplace_back(app.get_subcommand("info"), std::move(info));
    auto calibrate = dspark::cli::add_calibrate_command(app);
    c.emplace_back(app.get_subcommand("calibrate"), std::move(calibrate));
    auto serve = dspark::cli::add_serve_command(app);
    c.emplace_back(app.get_subcommand("serve"), std::move(serve));
    auto demo = dspark::cli::add_demo_command(app);
    c.emplace_back(app.get_subcommand("demo"), std::move(demo));
    auto regen = dspark::cli::add_regen_command(app);
    c.emplace_back(app.get_subcommand("regen"), std::move(regen));
    auto quantize = dspark::cli::add_quantize_command(app);
    c.emplace_back(app.get_subcommand("quantize"), std::move(quantize));
    auto eval = dspark::cli::add_eval_command(app);
    c.emplace_back(app.get_subcommand("eval"), std::move(eval));
    auto perplexity = dspark::cli::add_perplexity_command(app);
    c.emplace_back(app.get_subcommand("perplexity"), std::move(perplexity));
    return c;
  }();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (see dspark --help)");
    return 2;
  }

  try {
    for (const auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
    print_error("no command given (see dspark --help)");
    return 2;
  } catch (const dspark::Error& e) {
    print_error(e.what());
    return e.kind() == dspark::ErrorKind::invalid_input ? 2 : 1;
  } catch (const std::bad_alloc&) {
    print_error("out of host memory");
    return 1;
  } catch (const std::exception& e) {
    print_error(std::string("internal error: ") + e.what());
    return 1;
  } catch (...) {
    print_error("internal error: unknown exception");
    return 1;
  }
}
