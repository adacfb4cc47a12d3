// The `attnkit` command-line tool, run as a user would (test_cli_support.hpp): `info`, `--version`,
// `run OP ... --check` for every op on the CPU with tiny problems, and errors (exit code 2 with
// "attnkit: error: <message>"). --json, progress and Python's spellings: test_cli_*.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/version.hpp"
#include "test_cli_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Tiny problems keep every run well under a second; --warmup 0 --repeat 1 times one call.
const std::string kQuick = " --backend cpu --warmup 0 --repeat 1 --check";

void expect_check_passes(const CliResult& result, int outputs) {
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, Not(HasSubstr("FAIL")));
  int passes = 0;
  for (std::size_t at = result.output.find("PASS"); at != std::string::npos; at = result.output.find("PASS", at + 1)) {
    ++passes;
  }
  EXPECT_EQ(passes, outputs) << result.output;
}

TEST(Cli, InfoShowsVersionBackendsAndThreads) {
  const CliResult result = run_cli("info");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, AllOf(HasSubstr(std::string("attnkit ") + ATTNKIT_VERSION_STRING),
                                   HasSubstr("C ABI version: " + std::to_string(ATTNKIT_ABI_VERSION)),
                                   HasSubstr("backends: cpu yes, cuda"), HasSubstr("CUDA archs compiled:"),
                                   HasSubstr("CUDA runtime:"), HasSubstr("CUDA devices:"), HasSubstr("CPU threads:")));
}

TEST(Cli, VersionFlagPrintsTheVersion) {
  const CliResult result = run_cli("--version");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr(ATTNKIT_VERSION_STRING));
}

TEST(Cli, RunNa2dWithCheckPasses) {
  const CliResult result = run_cli(
      "run na2d --tokens 9x11 --kernel-size 3x5 --dilation 2x1 --stride 1x2 --causal 0x1 --heads 2 "
      "--head-dim 8" +
      kQuick);
  expect_check_passes(result, 2);  // out, lse
  EXPECT_THAT(result.output, AllOf(HasSubstr("forward:"), HasSubstr("ms"), HasSubstr("FLOP/s"),
                                   HasSubstr("check: rel_l2(out) = "), HasSubstr("(tolerance 1e-05) PASS")));
}

TEST(Cli, RunNa2dCountsAttendedPairsExactly) {
  // 9x11 tokens, window 3x5 without dilation or causality: every query sees exactly 15 keys.
  const CliResult result =
      run_cli("run na2d --tokens 9x11 --kernel-size 3x5 --heads 2 --head-dim 8 --batch 3" + kQuick);
  EXPECT_THAT(result.output, HasSubstr("attended pairs: " + std::to_string(3 * 2 * 9 * 11 * 15) + " "));
}

TEST(Cli, RunAttentionBackwardWithCheckPasses) {
  const CliResult result = run_cli(
      "run attention --tokens 13 --tokens-kv 17 --causal --causal-align bottom-right "
      "--heads 4 --heads-kv 2 --head-dim 8 --head-dim-v 4 --backward" +
      kQuick);
  expect_check_passes(result, 5);  // out, lse, grad_q, grad_k, grad_v
  EXPECT_THAT(result.output, HasSubstr("backward:"));
}

TEST(Cli, RunNa1dAndNa3dWithCheckPass) {
  expect_check_passes(
      run_cli("run na1d --tokens 23 --kernel-size 5 --dilation 3 --stride 2 --head-dim 8 --dtype f16" + kQuick), 2);
  expect_check_passes(run_cli("run na3d --tokens 3x4x5 --kernel-size 3x3x3 --causal 1x0x0 --heads 1 --head-dim 8 "
                              "--dtype bf16" +
                              kQuick),
                      2);
}

TEST(Cli, RunSparseOpsWithCheckPass) {
  expect_check_passes(run_cli("run block-sparse --tokens 37 --block-size 8x16 --density 0.4 --head-dim 8" + kQuick), 2);
  expect_check_passes(
      run_cli("run element-sparse --tokens 19 --tokens-kv 23 --density 0.2 --head-dim 8 --dtype f64" + kQuick), 2);
}

TEST(Cli, RunRetentionWithCheckPasses) {
  const CliResult result = run_cli(
      "run retention --tokens 21 --heads 2 --head-dim 8 --head-dim-v 4 --mode chunkwise "
      "--chunk 4 --backward" +
      kQuick);
  expect_check_passes(result, 4);  // out, grad_q, grad_k, grad_v
  EXPECT_THAT(result.output, HasSubstr("FLOPs = "));
}

TEST(Cli, RunGemmWithCheckPasses) {
  const CliResult result =
      run_cli("run gemm --m 13 --n 9 --k 7 --batch 2 --transpose-b --alpha 0.5 --beta -1" + kQuick);
  expect_check_passes(result, 1);
  EXPECT_THAT(result.output, HasSubstr("FLOPs = 2*batch*m*n*k"));
}

// The CLI takes the tuner's mode from ATTNKIT_TUNE, whose parser takes both spellings of load-only.
TEST(Cli, TuneModeLoadOnlyIsAcceptedInEitherSpelling) {
  for (const char* spelling : {"load-only", "load_only"}) {
    const CliResult result = run_cli("run attention --tokens 16 --heads 1 --head-dim 8" + kQuick,
                                     std::string("ATTNKIT_LOG_LEVEL=warning ATTNKIT_TUNE=") + spelling + " ");
    expect_check_passes(result, 2);
    EXPECT_THAT(result.output, Not(HasSubstr("ATTNKIT_TUNE"))) << spelling;
  }
}

TEST(Cli, AnUnknownTuneModeIsReportedWithTheAllowedSpellings) {
  const CliResult result = run_cli("run attention --tokens 16 --heads 1 --head-dim 8" + kQuick,
                                   "ATTNKIT_LOG_LEVEL=warning ATTNKIT_TUNE=sometimes ");
  expect_check_passes(result, 2);
  EXPECT_THAT(
      result.output,
      HasSubstr("ATTNKIT_TUNE='sometimes'; allowed: off, on, load-only (also spelled load_only); using load-only"));
}

TEST(Cli, LibraryErrorExitsTwoWithItsMessage) {
  const CliResult result = run_cli("run na2d --tokens 16x16 --kernel-size 9 --dilation 2 --backend cpu");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("attnkit: error: mask.neighborhood[0].kernel_size: 9 with dilation 2 spans 18 "
                                       "tokens but tokens[0] is 16; allowed: kernel_size*dilation <= extent"));
}

TEST(Cli, MalformedOptionValueExitsTwo) {
  const CliResult result = run_cli("run na2d --tokens 16xx");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output,
              AllOf(HasSubstr("attnkit: error: --tokens: '16xx'"), HasSubstr("allowed: e.g. 64 or 64x64")));
}

TEST(Cli, UnknownOpExitsTwo) {
  const CliResult result = run_cli("run flash");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, AllOf(HasSubstr("attnkit: error:"), HasSubstr("flash"), HasSubstr("na2d")));
}

TEST(Cli, MissingCommandExitsTwo) {
  const CliResult result = run_cli("");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output, HasSubstr("attnkit: error:"));
}

}  // namespace
}  // namespace attnkit::test
