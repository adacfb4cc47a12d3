// Subcommands of the `attnkit` tool, one file each (command_<name>.cpp). A command registers its
// options on the parent app and returns the action main() runs when it was chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace attnkit::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // returns the exit code
};

Command add_info_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_tune_command(CLI::App& parent);   // command_tune.cpp (the tuner's work)
Command add_cache_command(CLI::App& parent);  // command_cache.cpp (the tuner's work)

}  // namespace attnkit::cli
