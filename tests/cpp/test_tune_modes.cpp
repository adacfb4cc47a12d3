// When the tuner may benchmark (DESIGN §6.5-6.7, §6.9): deterministic mode, load-only, off,
// CUDA-graph capture, per-direction toggles, and the environment that selects them, with both
// spellings of load-only (load-only documented, load_only accepted).
#include <gtest/gtest.h>

#include <map>

#include "test_tune_support.hpp"

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;
using testing::TempDir;

const std::map<std::string, double> kTimings{{"c0", 100}, {"c1", 80}, {"c2", 20}};

// Fills `dir` with a tuned winner (c2) for `key`.
void warm_cache(const ConfigSpaceRegistry& registry, const TempDir& dir, const ProblemKey& key) {
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
  ScriptedRunner runner(kTimings);
  ASSERT_EQ(tuner.choose(key, &runner).config->id, "c2");
}

TEST(TuneModes, DeterministicModeNeverCallsTheRunner) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.deterministic = true;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner(kTimings);
  for (const int64_t length : {100, 1000, 5000}) {
    const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem(length)), &runner);
    EXPECT_EQ(choice.config->id, "c0");
    EXPECT_EQ(choice.source, ChoiceSource::default_config);
  }
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneModes, DeterministicModeUsesACachedWinner) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  warm_cache(registry, dir, key);
  auto settings = testing::fast_settings(TuneMode::on, dir.str());
  settings.deterministic = true;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner(kTimings);
  EXPECT_EQ(tuner.choose(key, &runner).config->id, "c2");
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneModes, LoadOnlyNeverCallsTheRunnerAndUsesCacheHits) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey cached = make_problem_key(testing::test_problem(1000));
  const ProblemKey unseen = make_problem_key(testing::test_problem(3000));
  warm_cache(registry, dir, cached);
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  ScriptedRunner runner(kTimings);
  const TuneChoice hit = tuner.choose(cached, &runner);
  EXPECT_EQ(hit.config->id, "c2");
  EXPECT_EQ(hit.source, ChoiceSource::cached);
  const TuneChoice miss = tuner.choose(unseen, &runner);
  EXPECT_EQ(miss.config->id, "c0");
  EXPECT_EQ(miss.source, ChoiceSource::default_config);
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneModes, CapturingUsesTheDefaultWithoutBenchmarkingAndTunesAfterwards) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner(kTimings);
  const ProblemKey key = make_problem_key(testing::test_problem());
  const TuneChoice during = tuner.choose(key, &runner, /*capturing=*/true);
  EXPECT_EQ(during.config->id, "c0");
  EXPECT_EQ(runner.total_calls(), 0);
  const TuneChoice after = tuner.choose(key, &runner, /*capturing=*/false);
  EXPECT_EQ(after.config->id, "c2");
  EXPECT_EQ(after.source, ChoiceSource::tuned);
}

TEST(TuneModes, CapturingStillUsesAKnownWinner) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  ScriptedRunner runner(kTimings);
  const ProblemKey key = make_problem_key(testing::test_problem());
  tuner.choose(key, &runner);
  EXPECT_EQ(tuner.choose(key, &runner, /*capturing=*/true).config->id, "c2");
}

TEST(TuneModes, OffModeIgnoresTheCacheAndNeverBenchmarks) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  warm_cache(registry, dir, key);
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::off, dir.str())));
  ScriptedRunner runner(kTimings);
  EXPECT_EQ(tuner.choose(key, &runner).config->id, "c0");
  EXPECT_EQ(runner.total_calls(), 0);
}

TEST(TuneModes, ModeOnWithoutARunnerKeepsTheDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  const TuneChoice choice = tuner.choose(make_problem_key(testing::test_problem()), nullptr);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(choice.source, ChoiceSource::default_config);
}

TEST(TuneModes, ADisabledDirectionIsNotTuned) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.backward_pass = false;
  Tuner tuner(testing::test_options(registry, settings));
  ScriptedRunner runner(kTimings);
  const ProblemKey backward = make_problem_key(testing::test_problem(1000, TuneOp::attention_backward));
  EXPECT_EQ(tuner.choose(backward, &runner).source, ChoiceSource::default_config);
  EXPECT_EQ(runner.total_calls(), 0);
  const ProblemKey forward = make_problem_key(testing::test_problem(1000, TuneOp::attention_forward));
  EXPECT_EQ(tuner.choose(forward, &runner).source, ChoiceSource::tuned);
}

TEST(TuneModes, AnOpWithoutAConfigSpaceIsReported) {
  const auto registry = testing::scripted_registry({10});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  try {
    tuner.choose(make_problem_key(testing::test_problem(64, TuneOp::gemm)), nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("gemm"), std::string::npos);
  }
}

TEST(TuneModes, EnvironmentSelectsModeDeterminismAndCacheFolder) {
  const std::map<std::string, std::string> env{
      {"ATTNKIT_TUNE", "on"}, {"ATTNKIT_DETERMINISTIC", "1"}, {"ATTNKIT_CACHE_DIR", "/tmp/attnkit-cache-x"}};
  const TunerSettings s = settings_from_environment([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  EXPECT_EQ(s.mode, TuneMode::on);
  EXPECT_TRUE(s.deterministic);
  EXPECT_EQ(s.cache_dir, "/tmp/attnkit-cache-x");
}

TEST(TuneModes, DefaultsAreLoadOnlyWithTheCacheUnderHome) {
  const TunerSettings s = settings_from_environment(
      [](const char* name) -> const char* { return std::string(name) == "HOME" ? "/home/someone" : nullptr; });
  EXPECT_EQ(s.mode, TuneMode::load_only);
  EXPECT_FALSE(s.deterministic);
  EXPECT_EQ(s.cache_dir, "/home/someone/.cache/attnkit");
  EXPECT_EQ(s.top_k, 4);
  EXPECT_DOUBLE_EQ(s.margin, 0.03);
}

TEST(TuneModes, LoadOnlyIsAcceptedWithAHyphenOrAnUnderscore) {
  EXPECT_EQ(parse_mode("load-only"), TuneMode::load_only);
  EXPECT_EQ(parse_mode("load_only"), TuneMode::load_only);
  EXPECT_EQ(parse_mode("off"), TuneMode::off);
  EXPECT_EQ(parse_mode("0"), TuneMode::off);
  EXPECT_EQ(parse_mode("on"), TuneMode::on);
  EXPECT_EQ(parse_mode("1"), TuneMode::on);
  EXPECT_FALSE(parse_mode("loadonly").has_value());
  EXPECT_FALSE(parse_mode("Load-Only").has_value());
  EXPECT_FALSE(parse_mode("").has_value());
}

TEST(TuneModes, TheDocumentedSpellingIsLoadOnlyWithAHyphen) {
  EXPECT_EQ(mode_name(TuneMode::load_only), "load-only");
  EXPECT_NE(std::string(kModeSpellings).find("load-only"), std::string::npos);
  EXPECT_EQ(parse_mode(mode_name(TuneMode::load_only)), TuneMode::load_only) << "names parse back";
  EXPECT_EQ(parse_mode(mode_name(TuneMode::on)), TuneMode::on);
  EXPECT_EQ(parse_mode(mode_name(TuneMode::off)), TuneMode::off);
}

TEST(TuneModes, TheEnvironmentTakesEitherSpellingOfLoadOnly) {
  for (const char* spelling : {"load-only", "load_only"}) {
    const TunerSettings s = settings_from_environment(
        [&](const char* name) -> const char* { return std::string(name) == "ATTNKIT_TUNE" ? spelling : nullptr; });
    EXPECT_EQ(s.mode, TuneMode::load_only) << spelling;
  }
  const TunerSettings on = settings_from_environment(
      [](const char* name) -> const char* { return std::string(name) == "ATTNKIT_TUNE" ? "on" : nullptr; });
  EXPECT_EQ(on.mode, TuneMode::on);
}

TEST(TuneModes, AnUnknownModeFallsBackToLoadOnly) {
  const TunerSettings s = settings_from_environment(
      [](const char* name) -> const char* { return std::string(name) == "ATTNKIT_TUNE" ? "sometimes" : nullptr; });
  EXPECT_EQ(s.mode, TuneMode::load_only);
}

}  // namespace
}  // namespace attnkit::tune
