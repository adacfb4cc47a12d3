// Offline tuning behind `attnkit tune` (DESIGN §6.8): dry runs, problem lists, progress, and the
// built-in config spaces.
#include <gtest/gtest.h>

#include <fstream>

#include "attnkit/version.hpp"
#include "cpu/tune/cpu_attention_space.hpp"
#include "test_tune_support.hpp"
#include "tune/offline_tuning.hpp"
#include "tune/problem_file.hpp"

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;
using testing::TempDir;

TEST(TuneOffline, DryRunListsValidConfigsCheapestFirstWithReasonsForTheRest) {
  const ConfigSpace space = cpu_attention_space(TuneOp::attention_forward);
  TunerSettings settings;
  const DryRunReport report = dry_run(space, testing::test_problem(4000), cpu_device_limits(4), settings);
  EXPECT_EQ(report.key.spec.tokens[0], 4096);
  ASSERT_FALSE(report.ranking.valid.empty());
  for (size_t i = 1; i < report.ranking.valid.size(); ++i) {
    EXPECT_LE(report.ranking.valid[i - 1].cost.seconds, report.ranking.valid[i].cost.seconds);
  }
  // The default is the CPU drivers' own choice (what ran before tuning), not the cheapest predicted.
  EXPECT_EQ(report.default_id, "q32-all");
  // The top 4, plus the default when the cost model did not rank it among them.
  bool default_in_top = false;
  for (size_t i = 0; i < 4; ++i) default_in_top = default_in_top || report.ranking.valid[i].config->id == "q32-all";
  EXPECT_EQ(report.would_time.size(), default_in_top ? 4u : 5u);
  // On 4 threads, configs asking for 8 or more threads cannot run; t4 duplicates "all".
  bool rejected_t8 = false, rejected_t4 = false;
  for (const auto& r : report.ranking.rejected) {
    if (r.config->id == "q64-t8") rejected_t8 = r.reason.find("threads") != std::string::npos;
    if (r.config->id == "q64-t4") rejected_t4 = r.reason.find("same as threads=all") != std::string::npos;
  }
  EXPECT_TRUE(rejected_t8);
  EXPECT_TRUE(rejected_t4);
}

TEST(TuneOffline, ProblemListReadsJsonLinesAndSkipsComments) {
  TempDir dir;
  const auto file = dir.path() / "problems.jsonl";
  std::ofstream(file) << "# dense and neighborhood problems\n"
                         "{\"op\": \"attention_fwd\", \"dtype\": \"bf16\", \"batch\": 2, \"heads\": 8, \"heads_kv\": 2,"
                         " \"head_dim\": 128, \"tokens\": 4000, \"mask\": \"causal\"}\n"
                         "\n"
                         "{\"op\": \"attention_bwd\", \"tokens\": [56, 56], \"mask\": \"neighborhood\","
                         " \"kernel_size\": 7, \"dilation\": [2, 1], \"causal\": [false, true]}\n";
  const auto problems = read_problem_list(file);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].dtype, DType::bf16);
  EXPECT_EQ(problems[0].heads_kv, 2);
  EXPECT_EQ(problems[0].head_dim_v, 128);
  EXPECT_EQ(problems[0].tokens_kv[0], 4000);
  EXPECT_EQ(problems[1].op, TuneOp::attention_backward);
  EXPECT_EQ(problems[1].token_dims, 2);
  EXPECT_EQ(problems[1].neighborhood[1].kernel_size, 7);
  EXPECT_EQ(problems[1].neighborhood[0].dilation, 2);
  EXPECT_TRUE(problems[1].neighborhood[1].causal);
}

TEST(TuneOffline, ABadProblemLineNamesTheFileLineAndField) {
  TempDir dir;
  const auto file = dir.path() / "problems.jsonl";
  std::ofstream(file) << "{\"op\": \"attention_fwd\", \"tokens\": 64}\n"
                         "{\"op\": \"attention_fwd\", \"tokens\": [16], \"mask\": \"neighborhood\", \"kernel_size\": 9,"
                         " \"dilation\": 2}\n";
  try {
    read_problem_list(file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("problems.jsonl:2"), std::string::npos) << message;
    EXPECT_NE(message.find("kernel_size[0]: 9 with dilation 2"), std::string::npos) << message;
  }
}

TEST(TuneOffline, ProblemJsonRoundTrips) {
  ProblemSpec spec = testing::test_problem(333);
  spec.mask = MaskKind::block;
  spec.block_q = 64;
  spec.block_k = 32;
  spec.density = 0.25;
  const ProblemSpec back = problem_spec_from_json(problem_spec_to_json(spec));
  EXPECT_EQ(make_problem_key(back).text, make_problem_key(spec).text);
}

TEST(TuneOffline, TuningAListReportsProgressAndFillsTheCache) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  // 1000 and 1010 share a bucket: tuned once.
  const std::vector<ProblemSpec> problems{testing::test_problem(1000), testing::test_problem(1010),
                                          testing::test_problem(3000, TuneOp::attention_backward)};
  std::vector<TuneProgress> reports;
  int runners_made = 0;
  const OfflineTuneSummary summary = tune_problem_list(
      tuner, problems,
      [&](const ProblemSpec& bucketed) {
        EXPECT_EQ(bucketed.tokens[0] % 256, 0) << "runners get the bucket's representative size";
        ++runners_made;
        return std::make_unique<ScriptedRunner>(std::map<std::string, double>{{"c0", 50}, {"c1", 20}});
      },
      [&](const TuneProgress& p) { reports.push_back(p); });
  EXPECT_EQ(summary.tuned, 2u);
  EXPECT_EQ(summary.cached, 1u);
  EXPECT_EQ(summary.failed, 0u);
  EXPECT_EQ(runners_made, 2);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports.back().problems_done, 3u);
  EXPECT_EQ(reports.back().problems_total, 3u);
  EXPECT_EQ(reports.back().configs_timed, 6u);
  EXPECT_DOUBLE_EQ(reports.back().estimated_left_seconds, 0.0);
  EXPECT_EQ(reports[0].last_winner, "c1");

  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  EXPECT_EQ(reloaded.known_winners(), 2u);
}

TEST(TuneOffline, AProblemThatCannotBeRunIsCountedAndTheRestContinue) {
  const auto registry = testing::scripted_registry({10, 20});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  const std::vector<ProblemSpec> problems{testing::test_problem(64, TuneOp::gemm), testing::test_problem(64)};
  const OfflineTuneSummary summary = tune_problem_list(
      tuner, problems,
      [](const ProblemSpec&) { return std::make_unique<ScriptedRunner>(std::map<std::string, double>{}); }, nullptr);
  EXPECT_EQ(summary.failed, 1u);
  EXPECT_EQ(summary.tuned, 1u);
  ASSERT_EQ(summary.errors.size(), 1u);
  EXPECT_NE(summary.errors[0].find("gemm"), std::string::npos);
}

TEST(TuneRegistry, BuiltinSpacesIncludeCpuAttentionBothDirections) {
  const ConfigSpaceRegistry& registry = builtin_config_spaces();
  EXPECT_NE(registry.find(TuneOp::attention_forward, Backend::cpu), nullptr);
  EXPECT_NE(registry.find(TuneOp::attention_backward, Backend::cpu), nullptr);
  EXPECT_EQ(registry.kernel_set_hash(Backend::cpu).size(), 16u);
}

TEST(TuneRegistry, KernelSetHashChangesWhenAConfigChanges) {
  EXPECT_EQ(testing::scripted_registry({1, 2}).kernel_set_hash(Backend::cpu),
            testing::scripted_registry({1, 2}).kernel_set_hash(Backend::cpu));
  EXPECT_NE(testing::scripted_registry({1, 2}).kernel_set_hash(Backend::cpu),
            testing::scripted_registry({1, 3}).kernel_set_hash(Backend::cpu));
}

TEST(TuneRegistry, ASecondSpaceForTheSameOpIsRejected) {
  ConfigSpaceRegistry registry;
  registry.add(testing::scripted_space({1}));
  EXPECT_THROW(registry.add(testing::scripted_space({2})), Error);
}

TEST(TuneRegistry, CpuDeviceKeyNamesTheCpuAndThisBuild) {
  const DeviceKey key = cpu_device_key(3, builtin_config_spaces());
  EXPECT_EQ(key.backend, Backend::cpu);
  EXPECT_FALSE(key.name.empty());
  EXPECT_EQ(key.processors, 3);
  EXPECT_EQ(key.library_version, version_string());
  EXPECT_NE(canonical_device_text(key).find("processors=3"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::tune
