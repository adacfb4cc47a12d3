// `--json` of `attnkit run`, `tune`, `cache show`, `cache merge`, `cache clear` and `info`: stdout is one JSON document
// holding the facts the text output gives, under the field names their --help lists; errors still go to stderr with a
// non-zero exit code and nothing on stdout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/version.hpp"
#include "test_cli_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kQuick = " --backend cpu --warmup 0 --repeat 1 --quiet";

// The document on stdout, after checking that the command succeeded and printed exactly one.
Json document_of(const CliResult& result, int exit_code = 0) {
  EXPECT_EQ(result.exit_code, exit_code) << result.output;
  EXPECT_TRUE(Json::accept(result.out)) << result.out;
  return Json::accept(result.out) ? Json::parse(result.out) : Json::object();
}

void expect_timing(const Json& timing) {
  for (const char* field : {"median_ms", "min_ms", "runs", "warmup", "flops_per_second"}) {
    EXPECT_TRUE(timing.contains(field)) << field << " in " << timing;
  }
}

TEST(CliJson, RunAttentionReportsProblemTimingsAndCheck) {
  const Json run = document_of(
      run_cli("run na2d --tokens 9x11 --kernel-size 3x5 --heads 2 --head-dim 8 --backward --check --json" + kQuick));
  EXPECT_EQ(run["op"], "na2d");
  EXPECT_EQ(run["backend"], "cpu");
  EXPECT_EQ(run["device"], "cpu");
  EXPECT_EQ(run["dtype"], "f32");
  const Json& problem = run["problem"];
  EXPECT_EQ(problem["heads"], 2);
  EXPECT_EQ(problem["heads_kv"], 2);
  EXPECT_EQ(problem["tokens"], Json({9, 11}));
  EXPECT_EQ(problem["head_dim_v"], 8);
  EXPECT_EQ(problem["mask"]["kind"], "neighborhood");
  EXPECT_EQ(problem["mask"]["kernel_size"], Json({3, 5}));
  EXPECT_EQ(problem["mask"]["causal"], Json({false, false}));
  EXPECT_EQ(problem["attended_pairs"], 2 * 9 * 11 * 15);  // every query sees 3x5 keys
  EXPECT_GT(run["flops"]["forward"].get<double>(), 0.0);
  expect_timing(run["forward"]);
  expect_timing(run["backward"]);
  EXPECT_EQ(run["check"]["passed"], true);
  ASSERT_EQ(run["check"]["outputs"].size(), 5u);
  EXPECT_EQ(run["check"]["outputs"][0]["name"], "out");
  EXPECT_EQ(run["check"]["outputs"][4]["name"], "grad_v");
  EXPECT_EQ(run["check"]["outputs"][0]["tolerance"], 1e-5);
}

TEST(CliJson, RunRetentionAndGemmReportTheirOwnProblemFields) {
  const Json retention =
      document_of(run_cli("run retention --tokens 21 --heads 2 --head-dim 8 --mode parallel --json" + kQuick));
  EXPECT_EQ(retention["problem"]["mode"], "parallel");
  EXPECT_EQ(retention["problem"]["tokens"], 21);
  EXPECT_EQ(retention["problem"]["chunk_size"], 64);
  EXPECT_FALSE(retention.contains("check"));  // no --check
  const Json gemm = document_of(run_cli("run gemm --m 13 --n 9 --k 7 --transpose-b --check --json" + kQuick));
  EXPECT_EQ(gemm["problem"]["m"], 13);
  EXPECT_EQ(gemm["problem"]["transpose_b"], true);
  EXPECT_EQ(gemm["flops"]["forward"], 2.0 * 13 * 9 * 7);
  expect_timing(gemm["forward"]);
  EXPECT_FALSE(gemm.contains("backward"));
  EXPECT_EQ(gemm["check"]["outputs"][0]["name"], "c");
}

TEST(CliJson, AnErrorGoesToStderrAndLeavesStdoutEmpty) {
  const CliResult result = run_cli("run na2d --tokens 16x16 --kernel-size 9 --dilation 2 --json" + kQuick);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_THAT(result.err, HasSubstr("attnkit: error: mask.neighborhood[0].kernel_size"));
  const CliResult usage = run_cli("tune --dry-run na2d --tokens 64 --json");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.out, "");
  EXPECT_THAT(usage.err, HasSubstr("attnkit: error: --tokens"));
}

TEST(CliJson, TuneDryRunListsTheConfigsWithOneDefault) {
  const Json dry = document_of(run_cli("tune --dry-run attention --tokens 64 --head-dim 16 --all --json"));
  EXPECT_THAT(dry["problem"].get<std::string>(), HasSubstr("attention_fwd"));
  EXPECT_EQ(dry["problem_spec"]["op"], "attention_fwd");
  EXPECT_EQ(dry["device"]["backend"], "cpu");
  EXPECT_EQ(dry["top_k"], 4);
  ASSERT_FALSE(dry["configs"].empty());
  int defaults = 0;
  for (const Json& config : dry["configs"]) {
    for (const char* field : {"config", "default", "timed", "predicted_seconds", "tiles", "waves", "flops", "bytes"}) {
      EXPECT_TRUE(config.contains(field)) << field;
    }
    if (config["default"] == true) {
      ++defaults;
      EXPECT_EQ(config["config"], dry["default"]);
    }
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_EQ(dry["rejected"].size(), dry["rejected_count"].get<size_t>());
}

TEST(CliJson, TuneOptimizeReportsEachProblemsWinner) {
  const std::string folder = fresh_folder("cli_json_optimize");
  const Json tuned = document_of(tune_one_problem(folder, " --quiet --json"));
  EXPECT_EQ(tuned["cache_dir"], folder);
  ASSERT_EQ(tuned["problems"].size(), 1u);
  EXPECT_EQ(tuned["problems"][0]["source"], "tuned");
  EXPECT_TRUE(tuned["problems"][0]["winner"].is_string());
  EXPECT_EQ(tuned["tuned"], 1);
  EXPECT_EQ(tuned["failed"], 0);
  EXPECT_TRUE(tuned["errors"].empty());
}

TEST(CliJson, CacheShowListsFilesWithTheirDeviceAndWinners) {
  const std::string folder = fresh_folder("cli_json_cache");
  ASSERT_EQ(tune_one_problem(folder, " --quiet").exit_code, 0);
  const Json shown = document_of(run_cli("cache show --dir '" + folder + "' --json"));
  EXPECT_EQ(shown["cache_dir"], folder);
  ASSERT_EQ(shown["files"].size(), 1u);
  const Json& file = shown["files"][0];
  EXPECT_EQ(file["valid"], true);
  EXPECT_EQ(file["device"]["backend"], "cpu");
  EXPECT_GT(file["timing_count"].get<int>(), 0);
  ASSERT_EQ(file["winners"].size(), 1u);
  for (const char* field : {"problem", "config", "default", "median_us", "default_median_us", "ignored"}) {
    EXPECT_TRUE(file["winners"][0].contains(field)) << field;
  }
  EXPECT_FALSE(file.contains("timings"));  // only with --timings
  const Json with_timings = document_of(run_cli("cache show --dir '" + folder + "' --timings --json"));
  EXPECT_EQ(with_timings["files"][0]["timings"].size(), file["timing_count"].get<size_t>());
}

TEST(CliJson, CacheMergeAndClearReportWhatTheyDid) {
  const std::string source = fresh_folder("cli_json_merge_source");
  ASSERT_EQ(tune_one_problem(source, " --quiet").exit_code, 0);
  const std::string target = fresh_folder("cli_json_merge_target");
  const Json merged = document_of(run_cli("cache merge '" + source + "' --dir '" + target + "' --json"));
  EXPECT_EQ(merged["cache_dir"], target);
  EXPECT_EQ(merged["files_merged"], 1);
  EXPECT_EQ(merged["files_rejected"], 0);
  EXPECT_EQ(merged["winners"], 1);
  EXPECT_GT(merged["timings"].get<int>(), 0);
  EXPECT_EQ(merged["written"].size(), 1u);
  EXPECT_TRUE(merged["problems"].empty());
  const Json cleared = document_of(run_cli("cache clear --dir '" + target + "' --json"));
  EXPECT_EQ(cleared["cache_dir"], target);
  EXPECT_EQ(cleared["removed"], 1);
  EXPECT_EQ(document_of(run_cli("cache clear --dir '" + target + "' --json"))["removed"], 0);
}

TEST(CliJson, InfoReportsVersionBackendsAndThreads) {
  const Json info = document_of(run_cli("info --json"));
  EXPECT_EQ(info["version"], ATTNKIT_VERSION_STRING);
  EXPECT_EQ(info["abi_version"], ATTNKIT_ABI_VERSION);
  EXPECT_EQ(info["backends"]["cpu"], true);
  EXPECT_TRUE(info["backends"]["cuda"].is_boolean());
  EXPECT_TRUE(info["cuda_archs"].is_array());
  EXPECT_TRUE(info["cuda_devices"].is_array());
  EXPECT_GT(info["cpu_threads"].get<int>(), 0);
}

}  // namespace
}  // namespace attnkit::test
