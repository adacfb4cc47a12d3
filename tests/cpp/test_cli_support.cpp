#include "test_cli_support.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace attnkit::test {

CliResult run_cli(const std::string& arguments, const std::string& environment) {
  std::string stderr_path = testing::TempDir() + "attnkit_cli_stderr_XXXXXX";
  const int descriptor = mkstemp(stderr_path.data());
  CliResult result;
  if (descriptor < 0) return result;
  close(descriptor);
  const std::string command = environment + "'" + ATTNKIT_CLI_PATH + "' " + arguments + " 2>'" + stderr_path + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe != nullptr) {
    char buffer[4096];
    while (std::fgets(buffer, sizeof(buffer), pipe)) result.out += buffer;
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::ifstream captured(stderr_path);
  std::stringstream text;
  text << captured.rdbuf();
  result.err = text.str();
  std::filesystem::remove(stderr_path);
  result.output = result.out + result.err;
  return result;
}

std::string fresh_folder(const std::string& name) {
  const std::filesystem::path folder =
      std::filesystem::path(testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder.string();
}

CliResult tune_one_problem(const std::string& folder, const std::string& options) {
  const std::string problems = folder + "/problems.jsonl";
  std::ofstream(problems) << R"({"op": "attention_fwd", "dtype": "f32", "tokens": 32, "head_dim": 8, "heads": 1})"
                          << "\n";
  return run_cli("tune --optimize '" + problems + "' --dir '" + folder + "' --warmup 0 --steps 2 --top-k 2" + options);
}

}  // namespace attnkit::test
