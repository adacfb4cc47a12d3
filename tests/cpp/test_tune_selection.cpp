// The tuner's choice among configs (DESIGN §6.3, §6.4): pruning by resources and predicted cost,
// measurement, the winner rule (margin; test_tune_never_loses.cpp covers the noise and the
// interleaving), and failed configs.
#include <gtest/gtest.h>

#include "test_tune_support.hpp"
#include "tune/candidate_ranking.hpp"
#include "tune/problem_key.hpp"

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;

TEST(TuneSelection, PicksTheTrulyFastestConfigFromInjectedTimings) {
  // Predicted order c0 < c1 < c2 < c3, but c2 really is fastest.
  const auto registry = testing::scripted_registry({10, 20, 30, 40});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.thorough_mode_forward = true;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner({{"c0", 90}, {"c1", 70}, {"c2", 40}, {"c3", 80}});
  const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem()), &runner);
  ASSERT_NE(choice.config, nullptr);
  EXPECT_EQ(choice.config->id, "c2");
  EXPECT_EQ(choice.source, ChoiceSource::tuned);
}

TEST(TuneSelection, ASingleCandidateIsChosenWithoutTiming) {
  const auto registry = testing::scripted_registry({10});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner({{"c0", 100}});
  const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem()), &runner);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(choice.source, ChoiceSource::tuned);
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneSelection, MarginKeepsTheDefaultWhenTheGainIsSmall) {
  const auto registry = testing::scripted_registry({10, 20, 30});  // default: c0, the cheapest predicted
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner({{"c0", 100}, {"c1", 98}, {"c2", 99}});  // 2 % faster: within the 3 % margin
  const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem()), &runner);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_GT(runner.calls("c1"), 0);
}

TEST(TuneSelection, NonDefaultWinsWhenFasterThanTheMargin) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner({{"c0", 100}, {"c1", 96}, {"c2", 99}});  // 4 % faster
  EXPECT_EQ(tuner.choose(make_problem_key(testing::test_problem()), &runner).config->id, "c1");
}

TEST(TuneSelection, FailedConfigsAreExcluded) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  // c1 would be fastest but fails to launch.
  ScriptedRunner runner({{"c0", 100}, {"c1", 10}, {"c2", 50}}, {"c1"});
  const TuneOutcome outcome = tuner.tune(make_problem_key(testing::test_problem()), runner);
  EXPECT_EQ(outcome.winner, "c2");
  bool saw_failure = false;
  for (const auto& t : outcome.timings) {
    if (t.config_id == "c1") {
      saw_failure = true;
      EXPECT_FALSE(t.ok);
      EXPECT_NE(t.error.find("launch failed"), std::string::npos);
    }
  }
  EXPECT_TRUE(saw_failure);
  EXPECT_EQ(runner.calls("c1"), 1);  // abandoned at its first failure
}

TEST(TuneSelection, EveryConfigFailingFallsBackToTheDefault) {
  const auto registry = testing::scripted_registry({10, 20});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner({}, {"c0", "c1"});
  EXPECT_EQ(tuner.tune(make_problem_key(testing::test_problem()), runner).winner, "c0");
}

TEST(TuneSelection, TopKPruningTimesOnlyTheCheapestPredicted) {
  const auto registry = testing::scripted_registry({50, 10, 80, 20, 70, 30, 60, 40});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.top_k = 3;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner({});
  tuner.choose(make_problem_key(testing::test_problem()), &runner);
  EXPECT_EQ(runner.timed_ids(), (std::set<std::string>{"c1", "c3", "c5"}));
}

TEST(TuneSelection, TopKAddsTheDefaultWhenItIsNotAmongTheCheapest) {
  auto space = testing::scripted_space({10, 20, 30, 40});
  space.default_config = [](const ProblemSpec&, const DeviceLimits&) { return std::string("c3"); };
  const CandidateRanking ranking = rank_candidates(space, testing::test_problem(), testing::test_limits());
  const Config* fallback = default_config(space, ranking, testing::test_problem(), testing::test_limits());
  ASSERT_NE(fallback, nullptr);
  EXPECT_EQ(fallback->id, "c3");
  std::vector<std::string> ids;
  for (const Config* c : configs_to_time(ranking, fallback, 2, false)) ids.push_back(c->id);
  EXPECT_EQ(ids, (std::vector<std::string>{"c0", "c1", "c3"}));
}

TEST(TuneSelection, ThoroughModeTimesEveryValidConfig) {
  ConfigSpaceRegistry registry;
  auto space = testing::scripted_space({50, 10, 80, 20, 70, 30});
  space.configs[4].resources.smem_bytes = int64_t{1} << 30;  // cannot fit any device: never timed
  registry.add(space);
  auto settings = testing::fast_settings(TuneMode::on);
  settings.thorough_mode_forward = true;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner({});
  tuner.choose(make_problem_key(testing::test_problem()), &runner);
  EXPECT_EQ(runner.timed_ids(), (std::set<std::string>{"c0", "c1", "c2", "c3", "c5"}));
}

TEST(TuneSelection, ResourceFiltersRejectConfigsThatDoNotFitTheDevice) {
  auto space = testing::scripted_space({10, 20, 30, 40});
  space.configs[1].resources.smem_bytes = 300 * 1024;  // H100 allows 227 KiB per CTA
  space.configs[2].resources.threads = 2048;           // at most 1024 per CTA
  space.configs[3].resources = {0, 255, 512};          // 130560 registers > 65536 per SM
  const CandidateRanking ranking = rank_candidates(space, testing::test_problem(), testing::test_limits());
  ASSERT_EQ(ranking.valid.size(), 1u);
  EXPECT_EQ(ranking.valid[0].config->id, "c0");
  ASSERT_EQ(ranking.rejected.size(), 3u);
  EXPECT_NE(ranking.rejected[0].reason.find("shared memory"), std::string::npos);
  EXPECT_NE(ranking.rejected[1].reason.find("threads"), std::string::npos);
  EXPECT_NE(ranking.rejected[2].reason.find("registers"), std::string::npos);
}

TEST(TuneSelection, SpaceValidityPredicateRejectsWithItsReason) {
  auto space = testing::scripted_space({10, 20});
  space.invalid_reason = [](const Config& c, const ProblemSpec& p, const DeviceLimits&) -> std::string {
    return c.id == "c0" && p.head_dim == 64 ? "head_dim 64 not instantiated" : "";
  };
  const CandidateRanking ranking = rank_candidates(space, testing::test_problem(), testing::test_limits());
  ASSERT_EQ(ranking.rejected.size(), 1u);
  EXPECT_EQ(ranking.rejected[0].reason, "head_dim 64 not instantiated");
  EXPECT_EQ(ranking.valid[0].config->id, "c1");
}

TEST(TuneSelection, EqualPredictedCostsAreOrderedByConfigId) {
  const auto space = testing::scripted_space({10, 10, 10});
  const CandidateRanking ranking = rank_candidates(space, testing::test_problem(), testing::test_limits());
  EXPECT_EQ(ranking.valid[0].config->id, "c0");
  EXPECT_EQ(ranking.valid[2].config->id, "c2");
}

TEST(TuneSelection, DefaultIsAPureFunctionOfTheProblem) {
  const auto registry = testing::scripted_registry({30, 10, 20});
  Tuner first(testing::test_options(registry, testing::fast_settings(TuneMode::off)));
  Tuner second(testing::test_options(registry, testing::fast_settings(TuneMode::off)));
  const ProblemKey key = make_problem_key(testing::test_problem(777));
  EXPECT_EQ(first.default_choice(key)->id, "c1");
  EXPECT_EQ(second.default_choice(key), first.default_choice(key));
  EXPECT_EQ(first.choose(key, nullptr).config->id, "c1");
}

class CountingRunner : public Runner {
 public:
  explicit CountingRunner(std::vector<double> script) : script_(std::move(script)) {}
  double measure_seconds(const Config&, int iteration) override {
    ++runs;
    last_iteration = iteration;
    return script_[static_cast<size_t>(iteration) % script_.size()];
  }
  int runs = 0;
  int last_iteration = -1;

 private:
  std::vector<double> script_;
};

TEST(TuneSelection, MeasurementStopsOnceTheSpreadIsSmall) {
  CountingRunner steady({1e-3});
  MeasurementPolicy policy{2, 4, 50, 0.05};
  const ConfigTiming timing = measure_config(steady, Config{"x", {}, {}}, policy);
  EXPECT_TRUE(timing.ok);
  EXPECT_EQ(timing.samples, 4);
  EXPECT_EQ(steady.runs, 6);  // 2 warm-up + 4 timed
  EXPECT_DOUBLE_EQ(timing.median_seconds, 1e-3);
}

TEST(TuneSelection, MeasurementRunsToTheStepLimitWhileNoisy) {
  CountingRunner noisy({1e-3, 2e-3, 3e-3, 4e-3});
  MeasurementPolicy policy{1, 3, 12, 0.05};
  const ConfigTiming timing = measure_config(noisy, Config{"x", {}, {}}, policy);
  EXPECT_EQ(timing.samples, 12);
  EXPECT_EQ(noisy.last_iteration, 12);  // iterations keep counting through warm-up for buffer rotation
  EXPECT_GT(timing.p75_seconds, timing.p25_seconds);
}

TEST(TuneSelection, ANonPositiveTimeMarksTheConfigFailed) {
  CountingRunner broken({0.0});
  const ConfigTiming timing = measure_config(broken, Config{"x", {}, {}}, MeasurementPolicy{});
  EXPECT_FALSE(timing.ok);
  EXPECT_FALSE(timing.error.empty());
}

}  // namespace
}  // namespace attnkit::tune
