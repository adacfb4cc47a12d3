// Progress of the CLI's long work (timing loops, the --check references, tune --optimize) goes to
// stderr, never to stdout, and --quiet silences it. A task shorter than the 2-second interval of a
// non-terminal stderr (these tests' pipe) prints one line: its final count and duration.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_cli_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kCheckedRun =
    "run attention --tokens 16 --heads 3 --head-dim 8 --backward --backend cpu --warmup 1 --repeat 2 --check";

int lines_in(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  return lines;
}

TEST(CliProgress, CheckAndTimingProgressGoesToStderrNotStdout) {
  const CliResult result = run_cli(kCheckedRun);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.err, AllOf(HasSubstr("attnkit: timing forward: 3/3 runs in "),
                                HasSubstr("attnkit: timing backward: 3/3 runs in "),
                                HasSubstr("attnkit: reference check (forward): 3/3 heads in "),
                                HasSubstr("attnkit: reference check (backward): 3/3 kv heads in ")));
  EXPECT_THAT(result.out, AllOf(HasSubstr("check: rel_l2(out)"), Not(HasSubstr("attnkit: timing")),
                                Not(HasSubstr("attnkit: reference check"))));
}

TEST(CliProgress, AShortTaskPrintsOneLine) {
  const CliResult result = run_cli(kCheckedRun);
  EXPECT_EQ(lines_in(result.err), 4) << result.err;  // two timings, two checks
}

TEST(CliProgress, JsonOnStdoutStaysOneDocumentWhileProgressIsShown) {
  const CliResult result = run_cli(kCheckedRun + " --json");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(nlohmann::json::accept(result.out)) << result.out;
  EXPECT_THAT(result.err, HasSubstr("attnkit: reference check (forward)"));
}

TEST(CliProgress, QuietSilencesProgressButNotTheReport) {
  const CliResult result = run_cli(kCheckedRun + " --quiet");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.err, "");
  EXPECT_THAT(result.out, HasSubstr("check: rel_l2(grad_v)"));
}

TEST(CliProgress, TuneOptimizeProgressGoesToStderrAndQuietSilencesIt) {
  const CliResult shown = tune_one_problem(fresh_folder("cli_progress_tune"), "");
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.err, HasSubstr("attnkit: tuning: 1/1 problems, "));
  EXPECT_THAT(shown.out, AllOf(HasSubstr("[1/1] attention_fwd"), HasSubstr("(tuned)"), HasSubstr("done: 1 tuned"),
                               Not(HasSubstr("attnkit: tuning"))));
  const CliResult quiet = tune_one_problem(fresh_folder("cli_progress_tune_quiet"), " --quiet");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.err, "");
}

}  // namespace
}  // namespace attnkit::test
