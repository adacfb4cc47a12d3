// Running the built `attnkit` tool as a user would (through the shell), for the test_cli*.cpp
// suites: its exit code, and its stdout and stderr apart, since stdout is the machine-readable
// channel (text or --json) and stderr carries progress and errors.
#pragma once
#include <string>

namespace attnkit::test {

struct CliResult {
  int exit_code = -1;
  std::string out;     // stdout
  std::string err;     // stderr
  std::string output;  // stdout, then stderr
};

// `arguments` as typed after `attnkit`; `environment`: assignments put before the command, e.g.
// "ATTNKIT_TUNE=on ".
CliResult run_cli(const std::string& arguments, const std::string& environment = "");

// A fresh empty folder under the test temp dir, e.g. for a tuning cache.
std::string fresh_folder(const std::string& name);

// `attnkit tune --optimize` of one tiny CPU problem (written to `folder`) into the cache in `folder`,
// quickly (no warm-up, 2 steps, 2 configs); `options` are added to the command.
CliResult tune_one_problem(const std::string& folder, const std::string& options);

}  // namespace attnkit::test
