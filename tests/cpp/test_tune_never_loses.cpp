// The tuner never loses to the default (DESIGN §6.4): the winner rule (a slower or merely tied
// candidate never replaces the default; a gain must exceed the margin and the measured noise), the
// interleaved measurement that gives the default the same conditions as every candidate (a shared
// warm-up, rotating rounds, one run counter for buffer rotation), and a property check over many
// scripted problems.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "test_tune_support.hpp"
#include "tune/problem_key.hpp"

namespace attnkit::tune {
namespace {

// A successful timing, in microseconds.
ConfigTiming timed(const std::string& id, double p25, double median, double p75, int samples = 20) {
  ConfigTiming t;
  t.config_id = id;
  t.ok = true;
  t.p25_seconds = p25 * 1e-6;
  t.median_seconds = median * 1e-6;
  t.p75_seconds = p75 * 1e-6;
  t.samples = samples;
  return t;
}

ConfigTiming exact(const std::string& id, double median) { return timed(id, median, median, median); }

ConfigTiming failed(const std::string& id) {
  ConfigTiming t;
  t.config_id = id;
  t.error = "launch failed";
  return t;
}

// ---- The winner rule ----------------------------------------------------------------------------

TEST(TuneNeverLoses, ASlowerCandidateNeverReplacesTheDefault) {
  for (const double margin : {0.0, 0.03, 0.2}) {
    EXPECT_EQ(choose_winner({exact("c0", 100), exact("c1", 101), exact("c2", 150)}, "c0", margin), "c0") << margin;
  }
}

TEST(TuneNeverLoses, AnEqualCandidateKeepsTheDefault) {
  EXPECT_EQ(choose_winner({exact("c1", 100), exact("c0", 100)}, "c0", 0.0), "c0");
  EXPECT_EQ(choose_winner({exact("a", 100), exact("c0", 100)}, "c0", 0.0), "c0") << "not by config id";
}

TEST(TuneNeverLoses, AGainWithinTheMarginKeepsTheDefault) {
  EXPECT_EQ(choose_winner({exact("c0", 100), exact("c1", 98)}, "c0", 0.03), "c0");
  EXPECT_EQ(choose_winner({exact("c0", 100), exact("c1", 98)}, "c0", 0.01), "c1");
}

TEST(TuneNeverLoses, AGainWithinTheMeasuredNoiseKeepsTheDefault) {
  // 10 % faster by the medians, but five samples each spread over +-10 %: the medians could differ
  // that much by chance.
  const ConfigTiming noisy_default = timed("c0", 90, 100, 110, 5);
  const ConfigTiming noisy_candidate = timed("c1", 81, 90, 99, 5);
  EXPECT_GT(comparison_noise(noisy_candidate, noisy_default), 0.10);
  EXPECT_EQ(choose_winner({noisy_default, noisy_candidate}, "c0", 0.03), "c0");
}

TEST(TuneNeverLoses, TheCandidatesNoiseCountsAsMuchAsTheDefaults) {
  const ConfigTiming steady_default = timed("c0", 99.5, 100, 100.5, 5);
  const ConfigTiming noisy_candidate = timed("c1", 70, 90, 110, 5);
  EXPECT_EQ(choose_winner({steady_default, noisy_candidate}, "c0", 0.03), "c0");
}

TEST(TuneNeverLoses, AGainBeyondMarginAndNoiseWins) {
  const ConfigTiming steady_default = timed("c0", 99, 100, 101);
  const ConfigTiming faster = timed("c1", 89, 90, 91);
  EXPECT_LT(required_gain(faster, steady_default, 0.03), 0.10);
  EXPECT_TRUE(beats_default(faster, steady_default, 0.03));
  const WinnerChoice choice =
      choose_winner(std::vector<std::vector<ConfigTiming>>{{steady_default, faster}}, "c0", 0.03);
  EXPECT_EQ(choice.id, "c1");
  EXPECT_EQ(choice.basis, WinnerBasis::beat_default);
}

TEST(TuneNeverLoses, MoreSamplesResolveASmallerGain) {
  // The same spread: with 5 samples a 6 % gain is within the noise, with 40 it is not.
  EXPECT_FALSE(beats_default(timed("c1", 91, 94, 97, 5), timed("c0", 97, 100, 103, 5), 0.03));
  EXPECT_TRUE(beats_default(timed("c1", 91, 94, 97, 40), timed("c0", 97, 100, 103, 40), 0.03));
}

TEST(TuneNeverLoses, AmongCandidatesThatBeatTheDefaultTheFastestWinsTiesById) {
  EXPECT_EQ(choose_winner({exact("c0", 100), exact("c1", 80), exact("c2", 70), exact("c3", 90)}, "c0", 0.03), "c2");
  EXPECT_EQ(choose_winner({exact("c0", 100), exact("c2", 70), exact("c1", 70)}, "c0", 0.03), "c1");
}

TEST(TuneNeverLoses, ANoisyFastestCandidateYieldsToAProvenOne) {
  // c1 has the lowest median but cannot be told apart from the default; c2 can.
  EXPECT_EQ(
      choose_winner({timed("c0", 99, 100, 101), timed("c1", 40, 80, 120, 5), timed("c2", 89, 90, 91)}, "c0", 0.03),
      "c2");
}

TEST(TuneNeverLoses, WithoutATimingOfTheDefaultNothingReplacesIt) {
  const WinnerChoice choice =
      choose_winner(std::vector<std::vector<ConfigTiming>>{{exact("c1", 10), exact("c2", 20)}}, "c0", 0.03);
  EXPECT_EQ(choice.basis, WinnerBasis::nothing_ran);
  EXPECT_EQ(choice.id, "");
}

TEST(TuneNeverLoses, ADefaultThatCannotRunIsReplacedByTheFastestThatRan) {
  const WinnerChoice choice = choose_winner(
      std::vector<std::vector<ConfigTiming>>{{failed("c0"), exact("c1", 30), exact("c2", 20)}}, "c0", 0.03);
  EXPECT_EQ(choice.basis, WinnerBasis::default_failed);
  EXPECT_EQ(choice.id, "c2");
}

TEST(TuneNeverLoses, RanksCompareEachCandidateWithTheDefaultTimedOnTheSameGpu) {
  // Rank 1's GPU is twice as fast: c2's 60 us beats rank 0's default but not its own (50 us).
  const std::vector<std::vector<ConfigTiming>> parts{{exact("c0", 100), exact("c1", 95)},
                                                     {exact("c0", 50), exact("c2", 60)}};
  const WinnerChoice choice = choose_winner(parts, "c0", 0.03);
  EXPECT_EQ(choice.id, "c1");
  EXPECT_EQ(choice.part, 0u);
  // The best ratio to its own default wins: c3 runs at 0.8x rank 1's default, c1 at 0.95x rank 0's.
  const std::vector<std::vector<ConfigTiming>> both{{exact("c0", 100), exact("c1", 95)},
                                                    {exact("c0", 50), exact("c3", 40)}};
  EXPECT_EQ(choose_winner(both, "c0", 0.03).id, "c3");
  EXPECT_EQ(choose_winner(both, "c0", 0.03).part, 1u);
}

// ---- Interleaved measurement --------------------------------------------------------------------

// Records every run (config, iteration) and returns base_us[config] * drift(run number) us, where the
// drift falls linearly from `start` to 1 over the first `drift_runs` runs: clocks warming up.
class DriftingRunner : public Runner {
 public:
  DriftingRunner(std::map<std::string, double> base_us, double start, int drift_runs)
      : base_us_(std::move(base_us)), start_(start), drift_runs_(drift_runs) {}
  double measure_seconds(const Config& config, int iteration) override {
    runs.emplace_back(config.id, iteration);
    const int n = static_cast<int>(runs.size()) - 1;
    const double drift = n >= drift_runs_ ? 1.0 : start_ - (start_ - 1.0) * n / drift_runs_;
    return base_us_.at(config.id) * drift * 1e-6;
  }
  std::vector<std::pair<std::string, int>> runs;

 private:
  std::map<std::string, double> base_us_;
  double start_;
  int drift_runs_;
};

std::vector<Config> configs(std::initializer_list<const char*> ids) {
  std::vector<Config> result;
  for (const char* id : ids) result.push_back(Config{id, {}, {}});
  return result;
}

std::vector<const Config*> pointers(const std::vector<Config>& configs) {
  std::vector<const Config*> result;
  for (const auto& c : configs) result.push_back(&c);
  return result;
}

TEST(TuneNeverLoses, EveryCandidateWarmsUpBeforeAnySampleIsKept) {
  const auto space = configs({"c0", "c1", "c2"});
  DriftingRunner runner({{"c0", 100}, {"c1", 100}, {"c2", 100}}, 1.0, 0);
  const MeasurementPolicy policy{/*warmup_steps=*/2, /*min_steps=*/3, /*max_steps=*/3, /*spread_threshold=*/0.05};
  const auto timings = measure_interleaved(runner, pointers(space), policy);
  ASSERT_EQ(runner.runs.size(), 15u);  // 2 warm-up rounds + 3 timed rounds of 3 candidates
  std::map<std::string, int> warmups;
  for (size_t i = 0; i < 6; ++i) ++warmups[runner.runs[i].first];
  EXPECT_EQ(warmups, (std::map<std::string, int>{{"c0", 2}, {"c1", 2}, {"c2", 2}}));
  for (const auto& t : timings) EXPECT_EQ(t.samples, 3) << t.config_id;
}

TEST(TuneNeverLoses, TheOrderRotatesEachRound) {
  const auto space = configs({"c0", "c1", "c2"});
  DriftingRunner runner({{"c0", 100}, {"c1", 100}, {"c2", 100}}, 1.0, 0);
  measure_interleaved(runner, pointers(space), MeasurementPolicy{1, 3, 3, 0.05});
  std::vector<std::string> timed_order;
  for (size_t i = 3; i < runner.runs.size(); ++i) timed_order.push_back(runner.runs[i].first);
  EXPECT_EQ(timed_order, (std::vector<std::string>{"c0", "c1", "c2", "c1", "c2", "c0", "c2", "c0", "c1"}));
}

TEST(TuneNeverLoses, EveryRunGetsTheNextIterationWhateverItsConfig) {
  const auto space = configs({"c0", "c1"});
  DriftingRunner runner({{"c0", 100}, {"c1", 100}}, 1.0, 0);
  measure_interleaved(runner, pointers(space), MeasurementPolicy{2, 3, 3, 0.05});
  for (size_t i = 0; i < runner.runs.size(); ++i) EXPECT_EQ(runner.runs[i].second, static_cast<int>(i));
}

TEST(TuneNeverLoses, TheWarmUpLastsAtLeastTheMinimumMeasuredTime) {
  const auto space = configs({"c0", "c1"});
  DriftingRunner runner({{"c0", 100}, {"c1", 100}}, 1.0, 0);
  MeasurementPolicy policy{1, 3, 3, 0.05};
  policy.min_warmup_seconds = 0.002;  // 20 runs of 100 us: 10 rounds of two
  measure_interleaved(runner, pointers(space), policy);
  EXPECT_EQ(runner.runs.size(), 20u + 6u);
}

TEST(TuneNeverLoses, TheWarmUpStopsAtItsRoundLimitWhenRunsAreTiny) {
  const auto space = configs({"c0"});
  DriftingRunner runner({{"c0", 1e-3}}, 1.0, 0);
  MeasurementPolicy policy{1, 1, 1, 0.05};
  policy.min_warmup_seconds = 10.0;
  measure_interleaved(runner, pointers(space), policy);
  EXPECT_EQ(runner.runs.size(), static_cast<size_t>(kMaxWarmupRounds) + 1u);
}

TEST(TuneNeverLoses, ACandidateThatThrowsIsExcludedAndTheOthersGoOn) {
  class FailsOnThirdRun : public Runner {
   public:
    double measure_seconds(const Config& config, int) override {
      if (config.id == "c1" && ++c1_runs == 3) throw Error(Status::cuda_error, "illegal address");
      return 1e-4;
    }
    int c1_runs = 0;
  } runner;
  const auto space = configs({"c0", "c1", "c2"});
  const auto timings = measure_interleaved(runner, pointers(space), MeasurementPolicy{1, 5, 5, 0.05});
  EXPECT_TRUE(timings[0].ok);
  EXPECT_FALSE(timings[1].ok);
  EXPECT_NE(timings[1].error.find("illegal address"), std::string::npos);
  EXPECT_EQ(runner.c1_runs, 3);
  EXPECT_EQ(timings[2].samples, 5);
}

TEST(TuneNeverLoses, DriftingClocksDoNotDisadvantageTheDefault) {
  // c0 is the default (cheapest predicted) and truly fastest; the clocks start 2x slow and warm up
  // over the first 40 runs.
  const auto registry = testing::scripted_registry({10, 20, 30});
  const MeasurementPolicy policy = testing::fast_settings(TuneMode::on).measurement(TuneOp::attention_forward);
  {
    // Timed one config after the other, the default (first) takes the slow clocks and loses to c1.
    DriftingRunner sequential({{"c0", 100}, {"c1", 101}, {"c2", 110}}, 2.0, 40);
    std::vector<ConfigTiming> one_by_one;
    for (const auto& config : registry.find(TuneOp::attention_forward, Backend::cpu)->configs) {
      one_by_one.push_back(measure_config(sequential, config, policy));
    }
    ASSERT_EQ(choose_winner(one_by_one, "c0", 0.03), "c1");
  }
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  DriftingRunner runner({{"c0", 100}, {"c1", 101}, {"c2", 110}}, 2.0, 40);
  const TuneOutcome outcome = tuner.tune(make_problem_key(testing::test_problem()), runner);
  EXPECT_EQ(outcome.default_id, "c0");
  EXPECT_EQ(outcome.winner, "c0");
}

TEST(TuneNeverLoses, UnderDriftAClearlyFasterCandidateStillWins) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.steps_forward = 20;
  settings.min_steps = 10;
  Tuner tuner(testing::test_options(registry, settings));
  DriftingRunner runner({{"c0", 100}, {"c1", 60}, {"c2", 110}}, 1.3, 20);
  EXPECT_EQ(tuner.tune(make_problem_key(testing::test_problem()), runner).winner, "c1");
}

// ---- Tuner paths ---------------------------------------------------------------------------------

TEST(TuneNeverLoses, ModeOnWithASingleCandidateTimesNothingAndKeepsTheDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.top_k = 1;  // the cheapest predicted is the default: one candidate
  Tuner tuner(testing::test_options(registry, settings));
  testing::ScriptedRunner runner({{"c0", 100}, {"c1", 10}, {"c2", 10}});
  const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem()), &runner);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneNeverLoses, ModeOnWhoseRunsAllFailKeepsTheDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  testing::ScriptedRunner runner({}, {"c0", "c1", "c2"});
  EXPECT_EQ(tuner.choose(make_problem_key(testing::test_problem()), &runner).config->id, "c0");
}

// Samples scatter uniformly within +-3 % of each config's true time (a tiny LCG, so the test reads
// the same on every standard library).
class NoisyRunner : public Runner {
 public:
  NoisyRunner(std::map<std::string, double> true_us, uint64_t seed) : true_us_(std::move(true_us)), state_(seed) {}
  double measure_seconds(const Config& config, int) override {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    const double unit = static_cast<double>(state_ >> 11) / static_cast<double>(uint64_t{1} << 53);
    return true_us_.at(config.id) * (1.0 + 0.06 * (unit - 0.5)) * 1e-6;
  }

 private:
  std::map<std::string, double> true_us_;
  uint64_t state_;
};

TEST(TuneNeverLoses, OverManyNoisyProblemsNoChoiceIsSlowerThanTheDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40});
  uint64_t draw = 12345;
  const auto next = [&draw] {
    draw = draw * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(draw >> 11) / static_cast<double>(uint64_t{1} << 53);
  };
  int improved = 0;
  for (int problem = 0; problem < 200; ++problem) {
    // True times: the default 100 us; others from 0.7x to 1.3x of it, never within 5 % below it
    // (where a correct choice and a wrong one cannot be told apart).
    std::map<std::string, double> true_us{{"c0", 100.0}};
    for (const char* id : {"c1", "c2", "c3"}) {
      const double ratio = 0.7 + 0.6 * next();
      true_us[id] = 100.0 * (ratio > 0.95 && ratio < 1.0 ? 1.0 : ratio);
    }
    Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
    NoisyRunner runner(true_us, 1000 + static_cast<uint64_t>(problem));
    const std::string winner =
        tuner.tune(make_problem_key(testing::test_problem(100 + problem)), runner, /*force=*/true).winner;
    EXPECT_LE(true_us.at(winner), true_us.at("c0")) << "problem " << problem << ": chose " << winner;
    improved += winner != "c0";
  }
  EXPECT_GT(improved, 50) << "real gains of 5 % or more are still found";
}

}  // namespace
}  // namespace attnkit::tune
