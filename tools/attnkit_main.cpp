// The `attnkit` command-line tool: `info`, `run OP ...`, `tune`, `cache`, `--version`. Every error, from the
// command line or from the library, is printed as "attnkit: error: <message>" with exit code 2;
// a failed --check exits 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"
#include "attnkit/version.hpp"
#include "cli_errors.hpp"
#include "commands.hpp"

namespace {

constexpr int kUsageOrLibraryError = 2;

int report_error(const std::string& message) {
  std::fflush(stdout);  // what was printed before the error comes first
  std::fprintf(stderr, "attnkit: error: %s\n", message.c_str());
  return kUsageOrLibraryError;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnkit::cli;
  CLI::App app{"attnkit: fused attention, neighborhood/sparse attention, retention and GEMM kernels"};
  app.set_version_flag("--version", std::string("attnkit ") + attnkit::version_string() + " (C ABI " +
                                        std::to_string(ATTNKIT_ABI_VERSION) + ")");
  app.require_subcommand(1);
  std::vector<Command> commands{add_info_command(app), add_run_command(app), add_tune_command(app),
                                add_cache_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    return report_error(std::string(error.what()) + " (see 'attnkit --help')");
  } catch (const std::exception& error) {  // a UsageError raised by an option's parser
    return report_error(error.what());
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) {
        return command.run();
      }
    }
    return report_error("no command given; allowed: info, run, tune, cache (see 'attnkit --help')");
  } catch (const attnkit::Error& error) {
    return report_error(error.what());
  } catch (const UsageError& error) {
    return report_error(error.what());
  } catch (const std::exception& error) {
    return report_error(std::string("unexpected failure: ") + error.what());
  }
}
