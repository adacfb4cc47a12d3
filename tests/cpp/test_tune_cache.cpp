// The persistent tuning cache (DESIGN §6.2): round trips, versioning, corruption, concurrent
// writers, merge and clear.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_tune_support.hpp"
#include "tune/cache_admin.hpp"
#include "tune/cache_file.hpp"
#include "tune/cache_format.hpp"

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;
using testing::TempDir;

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::filesystem::path& file, const std::string& text) { std::ofstream(file) << text; }

// c2 is the fastest by far, c0 the default: a cached winner is visible as "c2".
const std::map<std::string, double> kTimings{{"c0", 100}, {"c1", 80}, {"c2", 20}};

// Tunes one problem with `device` into `dir`; returns the cache file.
std::filesystem::path tune_into(const ConfigSpaceRegistry& registry, const std::string& dir, const DeviceKey& device,
                                const ProblemKey& key) {
  TunerOptions options = testing::test_options(registry, testing::fast_settings(TuneMode::on, dir));
  options.device = device;
  Tuner tuner(options);
  ScriptedRunner runner(kTimings);
  EXPECT_EQ(tuner.choose(key, &runner).config->id, "c2");
  return cache_file_path(dir, device);
}

TEST(TuneCache, AReloadedCacheHitsWithoutMeasuring) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  tune_into(registry, dir.str(), testing::test_device(registry), key);

  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
  ScriptedRunner runner(kTimings);
  const TuneChoice choice = reloaded.choose(key, &runner);
  EXPECT_EQ(choice.config->id, "c2");
  EXPECT_EQ(choice.source, ChoiceSource::cached);
  EXPECT_EQ(runner.total_calls(), 0);
  EXPECT_TRUE(reloaded.cache_problems().empty());
}

TEST(TuneCache, FileIsReadableJsonWithOneRecordPerTimingAndTheWinner) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  const auto file = tune_into(registry, dir.str(), testing::test_device(registry), key);
  EXPECT_EQ(file.parent_path(), dir.path());
  EXPECT_NE(file.filename().string().find(device_key_hash(testing::test_device(registry))), std::string::npos);

  const auto json = nlohmann::json::parse(read_text(file));
  EXPECT_EQ(json.at("format"), kCacheFormatName);
  EXPECT_EQ(json.at("format_version"), kCacheFormatVersion);
  EXPECT_EQ(json.at("device").at("name"), "test device");
  EXPECT_EQ(json.at("device").at("library_version"), "0.1.0");
  ASSERT_EQ(json.at("timings").size(), 3u);
  for (const auto& record : json.at("timings")) {
    EXPECT_EQ(record.at("problem"), key.text);
    EXPECT_TRUE(record.at("ok").get<bool>());
    EXPECT_GT(record.at("median_us").get<double>(), 0.0);
  }
  ASSERT_EQ(json.at("winners").size(), 1u);
  EXPECT_EQ(json.at("winners")[0].at("config"), "c2");
  EXPECT_EQ(json.at("winners")[0].at("default"), "c0") << "the winner names the default it beat";
  EXPECT_NE(read_text(file).find('\n'), std::string::npos) << "indented, one field per line";
}

// Writes a valid cache for `foreign` at the file name of this build's key, as a copied or
// mis-shipped cache would be.
std::filesystem::path plant_foreign_cache(const ConfigSpaceRegistry& registry, const TempDir& dir,
                                          const DeviceKey& foreign, const ProblemKey& key) {
  TempDir elsewhere;
  const auto source = tune_into(registry, elsewhere.str(), foreign, key);
  const auto target = cache_file_path(dir.path(), testing::test_device(registry));
  std::filesystem::copy_file(source, target);
  return target;
}

void expect_ignored_and_reported(const ConfigSpaceRegistry& registry, const TempDir& dir, const ProblemKey& key,
                                 const std::string& reported_field) {
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  ASSERT_EQ(tuner.cache_problems().size(), 1u);
  EXPECT_NE(tuner.cache_problems()[0].find(reported_field), std::string::npos) << tuner.cache_problems()[0];
  const TuneChoice choice = tuner.choose(key, nullptr);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(choice.source, ChoiceSource::default_config);
}

TEST(TuneCache, ForeignLibraryVersionIsIgnoredAndReported) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  DeviceKey old_build = testing::test_device(registry);
  old_build.library_version = "0.0.9";
  plant_foreign_cache(registry, dir, old_build, key);
  expect_ignored_and_reported(registry, dir, key, "library_version '0.0.9'");
}

TEST(TuneCache, ForeignKernelSetHashIsIgnoredAndReported) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  DeviceKey rebuilt = testing::test_device(registry);
  rebuilt.kernel_set_hash = testing::scripted_registry({10, 20, 31}).kernel_set_hash(Backend::cpu);
  ASSERT_NE(rebuilt.kernel_set_hash, testing::test_device(registry).kernel_set_hash);
  plant_foreign_cache(registry, dir, rebuilt, key);
  expect_ignored_and_reported(registry, dir, key, "kernel_set_hash");
}

TEST(TuneCache, ADifferentBuildUsesItsOwnFile) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  DeviceKey old_build = testing::test_device(registry);
  old_build.library_version = "0.0.9";
  EXPECT_NE(cache_file_path(dir.path(), old_build), cache_file_path(dir.path(), testing::test_device(registry)));
}

TEST(TuneCache, AnotherFormatVersionIsIgnoredAndReported) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  const auto file = tune_into(registry, dir.str(), testing::test_device(registry), key);
  auto json = nlohmann::json::parse(read_text(file));
  json["format_version"] = kCacheFormatVersion + 1;
  write_text(file, json.dump(1));
  expect_ignored_and_reported(registry, dir, key, "format version");
}

TEST(TuneCache, CorruptJsonIsIgnoredReportedThenOverwrittenCleanly) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  const auto file = tune_into(registry, dir.str(), testing::test_device(registry), key);
  const std::string text = read_text(file);
  write_text(file, text.substr(0, text.size() / 2));  // a torn write by some other tool

  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
  ASSERT_EQ(tuner.cache_problems().size(), 1u);
  EXPECT_NE(tuner.cache_problems()[0].find("not valid JSON"), std::string::npos);
  ScriptedRunner runner(kTimings);
  EXPECT_EQ(tuner.choose(key, &runner).source, ChoiceSource::tuned);

  const CacheLoad rewritten = read_cache_file(file, &tuner.device());
  EXPECT_TRUE(rewritten.problems.empty());
  EXPECT_EQ(rewritten.contents.timings.size(), 3u);
  EXPECT_EQ(rewritten.contents.winners.size(), 1u);
}

TEST(TuneCache, GarbageFieldsAreRejectedNotTrusted) {
  const ParsedCache parsed =
      parse_cache_json_text(R"({"format": "attnkit-tune-cache", "format_version": )" +
                            std::to_string(kCacheFormatVersion) + R"(, "device": {"backend": "cpu"}, "winners": 7})");
  EXPECT_FALSE(parsed.contents.has_value());
  EXPECT_NE(parsed.rejection.find("malformed"), std::string::npos);
  EXPECT_FALSE(parse_cache_json_text("[1, 2, 3]").contents.has_value());
}

// A child process: 200 separate read-merge-write cycles, one new record each.
[[noreturn]] void write_records_then_exit(const std::filesystem::path& file, const DeviceKey& device, int writer) {
  for (int i = 0; i < 200; ++i) {
    CacheContents one;
    one.device = device;
    TimingRecord record;
    record.problem = "writer " + std::to_string(writer) + " problem " + std::to_string(i);
    record.config = "c0";
    record.median_us = record.p25_us = record.p75_us = 1.0 + i;
    record.samples = 3;
    record.time_ms = now_unix_ms();
    one.timings.push_back(record);
    if (!merge_into_cache_file(file, one).empty()) ::_exit(1);
  }
  ::_exit(0);
}

TEST(TuneCache, ConcurrentWritersLoseNoRecords) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const DeviceKey device = testing::test_device(registry);
  const auto file = cache_file_path(dir.path(), device);
  std::vector<pid_t> children;
  for (int writer = 0; writer < 2; ++writer) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) write_records_then_exit(file, device, writer);
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const CacheLoad load = read_cache_file(file, &device);
  EXPECT_TRUE(load.problems.empty());
  EXPECT_EQ(load.contents.timings.size(), 400u);
  EXPECT_FALSE(nlohmann::json::parse(read_text(file), nullptr, /*allow_exceptions=*/false).is_discarded());
  size_t leftovers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    leftovers += entry.path().string().find(".tmp.") != std::string::npos;
  }
  EXPECT_EQ(leftovers, 0u);
}

TEST(TuneCache, MergeKeepsTheUnionAndTheNewestRecordOnAConflict) {
  TempDir a, b, target;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const DeviceKey device = testing::test_device(registry);
  auto contents = [&](const std::string& problem, const std::string& winner, int64_t time_ms) {
    CacheContents c;
    c.device = device;
    c.winners.push_back({problem, winner, "c0", time_ms});
    TimingRecord t;
    t.problem = problem;
    t.config = winner;
    t.median_us = static_cast<double>(time_ms);
    t.time_ms = time_ms;
    c.timings.push_back(t);
    return c;
  };
  ASSERT_EQ(merge_into_cache_file(cache_file_path(a.path(), device), contents("shared", "c1", 2000)), "");
  ASSERT_EQ(merge_into_cache_file(cache_file_path(a.path(), device), contents("only a", "c0", 1000)), "");
  ASSERT_EQ(merge_into_cache_file(cache_file_path(b.path(), device), contents("shared", "c2", 3000)), "");
  ASSERT_EQ(merge_into_cache_file(cache_file_path(b.path(), device), contents("only b", "c0", 1000)), "");
  write_text(b.path() / "tune-cpu-0000000000000000.json", "{ not json");

  const MergeSummary summary = merge_cache_files({a.path(), b.path()}, target.path());
  EXPECT_EQ(summary.files_merged, 2u);
  EXPECT_EQ(summary.files_rejected, 1u);
  ASSERT_EQ(summary.written.size(), 1u);
  const CacheLoad merged = read_cache_file(summary.written[0], &device);
  ASSERT_EQ(merged.contents.winners.size(), 3u);
  for (const auto& w : merged.contents.winners) {
    if (w.problem == "shared") {
      EXPECT_EQ(w.config, "c2");
    }
  }
  EXPECT_EQ(merged.contents.timings.size(), 4u);  // (shared, c1), (shared, c2), (only a, c0), (only b, c0)
}

TEST(TuneCache, ClearRemovesTheCacheFiles) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  tune_into(registry, dir.str(), testing::test_device(registry), make_problem_key(testing::test_problem()));
  ASSERT_EQ(list_cache_files(dir.path()).size(), 1u);
  EXPECT_EQ(clear_cache(dir.path()), 1u);
  EXPECT_TRUE(list_cache_files(dir.path()).empty());
}

// The evidence a winner carries (DESIGN §6.4): its own timing and its default's, in the same file.

TimingRecord timing_of(const ProblemKey& key, const std::string& config, double p25, double median, double p75) {
  TimingRecord t;
  t.problem = key.text;
  t.config = config;
  t.p25_us = p25;
  t.median_us = median;
  t.p75_us = p75;
  t.samples = 10;
  t.time_ms = 1000;
  return t;
}

// Writes a cache for this build holding `winner` (against `default_id`) and `timings`, then loads it
// into a load-only tuner.
std::unique_ptr<Tuner> load_planted(const ConfigSpaceRegistry& registry, const TempDir& dir, const ProblemKey& key,
                                    const std::string& winner, const std::string& default_id,
                                    const std::vector<TimingRecord>& timings) {
  CacheContents contents;
  contents.device = testing::test_device(registry);
  contents.winners.push_back({key.text, winner, default_id, 1000});
  contents.timings = timings;
  EXPECT_EQ(merge_into_cache_file(cache_file_path(dir.path(), contents.device), contents), "");
  return std::make_unique<Tuner>(
      testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
}

void expect_dropped(Tuner& tuner, const ProblemKey& key, const std::string& reason) {
  ASSERT_EQ(tuner.cache_problems().size(), 1u);
  EXPECT_NE(tuner.cache_problems()[0].find(reason), std::string::npos) << tuner.cache_problems()[0];
  EXPECT_EQ(tuner.known_winners(), 0u);
  const TuneChoice choice = tuner.choose(key, nullptr);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(choice.source, ChoiceSource::default_config);
}

TEST(TuneCache, AWinnerThatLostToItsRecordedDefaultIsDroppedOnLoad) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  auto tuner = load_planted(registry, dir, key, "c1", "c0",
                            {timing_of(key, "c0", 99, 100, 101), timing_of(key, "c1", 109, 110, 111)});
  expect_dropped(*tuner, key, "does not beat its default 'c0'");
}

TEST(TuneCache, AWinnerWithoutItsDefaultsTimingIsDroppedOnLoad) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  auto tuner = load_planted(registry, dir, key, "c2", "c0", {timing_of(key, "c2", 19, 20, 21)});
  expect_dropped(*tuner, key, "has no timing of its default 'c0'");
}

TEST(TuneCache, AWinnerNamingNoDefaultIsDroppedOnLoad) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  auto tuner = load_planted(registry, dir, key, "c2", "",
                            {timing_of(key, "c0", 99, 100, 101), timing_of(key, "c2", 19, 20, 21)});
  expect_dropped(*tuner, key, "names no default");
}

TEST(TuneCache, AWinnerWithinItsRecordedNoiseIsDroppedOnLoad) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  // 10 % faster by the medians, but the default's quartiles lie 20 % from its median.
  auto tuner = load_planted(registry, dir, key, "c1", "c0",
                            {timing_of(key, "c0", 80, 100, 120), timing_of(key, "c1", 89, 90, 91)});
  expect_dropped(*tuner, key, "does not beat its default 'c0' by more than the margin (3 %) and the noise (35.3 %)");
}

TEST(TuneCache, AWinnerWhoseRecordsShowTheGainIsUsed) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  auto tuner = load_planted(registry, dir, key, "c1", "c0",
                            {timing_of(key, "c0", 99, 100, 101), timing_of(key, "c1", 89, 90, 91)});
  EXPECT_TRUE(tuner->cache_problems().empty());
  const TuneChoice choice = tuner->choose(key, nullptr);
  EXPECT_EQ(choice.config->id, "c1");
  EXPECT_EQ(choice.source, ChoiceSource::cached);
}

TEST(TuneCache, ADefaultThatStayedNeedsNoTimings) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10});  // one config: decided without timing
  const ProblemKey key = make_problem_key(testing::test_problem());
  {
    Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
    ScriptedRunner runner(kTimings);
    ASSERT_EQ(tuner.choose(key, &runner).config->id, "c0");
    ASSERT_EQ(runner.total_calls(), 0);
  }
  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  EXPECT_TRUE(reloaded.cache_problems().empty());
  EXPECT_EQ(reloaded.choose(key, nullptr).source, ChoiceSource::cached);
}

TEST(TuneCache, AFormatVersion1FileWithoutEvidenceIsIgnoredAndReported) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  const DeviceKey device = testing::test_device(registry);
  // What attnkit wrote before winners carried their default.
  nlohmann::ordered_json old{{"format", kCacheFormatName},
                             {"format_version", 1},
                             {"device",
                              {{"backend", "cpu"},
                               {"name", device.name},
                               {"processors", device.processors},
                               {"compute_capability", device.compute_capability},
                               {"cuda_runtime", device.cuda_runtime},
                               {"cuda_driver", device.cuda_driver},
                               {"library_version", device.library_version},
                               {"kernel_set_hash", device.kernel_set_hash}}},
                             {"device_hash", device_key_hash(device)},
                             {"winners", {{{"problem", key.text}, {"config", "c1"}, {"time_ms", 1000}}}},
                             {"timings", nlohmann::ordered_json::array()}};
  write_text(cache_file_path(dir.path(), device), old.dump(1));
  expect_ignored_and_reported(registry, dir, key, "cache format version 1, this build reads version 2");
}

TEST(TuneCache, AnUnwritableFolderIsReportedNotFatal) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, "/proc/attnkit-no-such-dir")));
  ScriptedRunner runner(kTimings);
  EXPECT_EQ(tuner.choose(make_problem_key(testing::test_problem()), &runner).config->id, "c2");
}

}  // namespace
}  // namespace attnkit::tune
