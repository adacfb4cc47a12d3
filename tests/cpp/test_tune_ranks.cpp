// Multi-rank agreement (DESIGN §6.7): ranks whose own timings disagree still pick one config.
// Each "rank" is a thread with its own Tuner and runner, joined by an in-process RankGroup.
#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <thread>

#include "test_tune_support.hpp"
#include "tune/cache_file.hpp"

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;
using testing::TempDir;

// Shared state of an in-process group: a barrier and one slot per rank.
struct ThreadGroupState {
  explicit ThreadGroupState(int size) : size(size), sync(size), slots(static_cast<size_t>(size)) {}
  int size;
  std::barrier<> sync;
  std::vector<std::string> slots;
  int broadcasts = 0;
  int gathers = 0;
};

class ThreadRankGroup : public RankGroup {
 public:
  ThreadRankGroup(ThreadGroupState& state, int rank) : state_(state), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return state_.size; }
  void broadcast(std::string& bytes, int root) override {
    if (rank_ == root) {
      state_.slots[static_cast<size_t>(root)] = bytes;
      ++state_.broadcasts;
    }
    state_.sync.arrive_and_wait();
    bytes = state_.slots[static_cast<size_t>(root)];
    state_.sync.arrive_and_wait();
  }
  std::vector<std::string> all_gather(const std::string& bytes) override {
    state_.slots[static_cast<size_t>(rank_)] = bytes;
    if (rank_ == 0) ++state_.gathers;
    state_.sync.arrive_and_wait();
    std::vector<std::string> all = state_.slots;
    state_.sync.arrive_and_wait();
    return all;
  }

 private:
  ThreadGroupState& state_;
  int rank_;
};

// Rank r's runner for c0..c5: rank r alone would find c{r + offset} fastest, so no two ranks agree
// by themselves.
std::map<std::string, double> timings_of_rank(int rank, int offset = 1) {
  std::map<std::string, double> t;
  for (int c = 0; c < 6; ++c) t[testing::config_id(static_cast<size_t>(c))] = 100.0 + 5 * c;
  t[testing::config_id(static_cast<size_t>(rank + offset))] = 40.0 + rank;
  return t;
}

struct RankResult {
  std::string config;
  ChoiceSource source = ChoiceSource::default_config;
};

// Runs `body(rank, group)` on `size` threads and returns what each rank chose.
std::vector<RankResult> run_ranks(int size, const std::function<RankResult(int, std::shared_ptr<RankGroup>)>& body) {
  ThreadGroupState state(size);
  std::vector<RankResult> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back(
        [&, rank] { results[static_cast<size_t>(rank)] = body(rank, std::make_shared<ThreadRankGroup>(state, rank)); });
  }
  for (auto& t : threads) t.join();
  return results;
}

TunerOptions grouped_options(const ConfigSpaceRegistry& registry, std::shared_ptr<RankGroup> group,
                             AgreementStrategy strategy, const std::string& cache_dir = "") {
  auto settings = testing::fast_settings(TuneMode::on, cache_dir);
  settings.thorough_mode_forward = true;
  TunerOptions options = testing::test_options(registry, settings);
  options.group = std::move(group);
  options.agreement = strategy;
  return options;
}

TEST(TuneRanks, RootTunesAndBroadcastsSoAllRanksAgree) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40, 50, 60});
  const ProblemKey key = make_problem_key(testing::test_problem());
  std::vector<int> runner_calls(4);
  const auto results = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
    Tuner tuner(grouped_options(registry, group, AgreementStrategy::root_tunes));
    ScriptedRunner runner(timings_of_rank(rank));
    const TuneChoice choice = tuner.choose(key, &runner);
    runner_calls[static_cast<size_t>(rank)] = runner.total_calls();
    return RankResult{choice.config->id, choice.source};
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.config, "c1");  // rank 0's fastest
    EXPECT_EQ(r.source, ChoiceSource::tuned);
  }
  EXPECT_GT(runner_calls[0], 0);
  for (int rank = 1; rank < 4; ++rank) EXPECT_EQ(runner_calls[static_cast<size_t>(rank)], 0) << rank;
}

TEST(TuneRanks, SplitConfigsTimesEachCandidateOnceWithTheDefaultOnEveryRankAndAllRanksAgree) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40, 50, 60});
  const ProblemKey key = make_problem_key(testing::test_problem());
  std::vector<std::set<std::string>> timed(3);
  const auto results = run_ranks(3, [&](int rank, std::shared_ptr<RankGroup> group) {
    Tuner tuner(grouped_options(registry, group, AgreementStrategy::split_configs));
    ScriptedRunner runner(timings_of_rank(rank, 3));
    const TuneChoice choice = tuner.choose(key, &runner);
    timed[static_cast<size_t>(rank)] = runner.timed_ids();
    return RankResult{choice.config->id, choice.source};
  });
  // Rank r times c{r} and c{r+3}, and the default c0 to compare them with on its own GPU; alone it
  // would pick c{r+3} (40 + r us against its default's 100). Gathered, the best ratio to its own
  // default is c3's (0.40) -> every rank picks c3.
  for (const auto& r : results) {
    EXPECT_EQ(r.config, "c3");
    EXPECT_EQ(r.source, ChoiceSource::tuned);
  }
  EXPECT_EQ(timed[0], (std::set<std::string>{"c0", "c3"}));
  EXPECT_EQ(timed[1], (std::set<std::string>{"c0", "c1", "c4"}));
  EXPECT_EQ(timed[2], (std::set<std::string>{"c0", "c2", "c5"}));
}

TEST(TuneRanks, SplitConfigsCompareACandidateOnlyWithItsOwnRanksDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40});
  const ProblemKey key = make_problem_key(testing::test_problem());
  // Rank 1's GPU is twice as fast: its candidates c1 and c3 run faster than rank 0's default (100)
  // but slower than its own (50); rank 0's c2 is 1 % faster than its default. None may win.
  const auto results = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    Tuner tuner(grouped_options(registry, group, AgreementStrategy::split_configs));
    ScriptedRunner runner(rank == 0 ? std::map<std::string, double>{{"c0", 100}, {"c2", 99}}
                                    : std::map<std::string, double>{{"c0", 50}, {"c1", 60}, {"c3", 55}});
    return RankResult{tuner.choose(key, &runner).config->id, ChoiceSource::tuned};
  });
  for (const auto& r : results) EXPECT_EQ(r.config, "c0");
}

TEST(TuneRanks, TheRootsCacheHoldsTheEvidenceOfTheRankThatDecided) {
  TempDir dir;
  const auto registry = testing::scripted_registry({10, 20, 30, 40});
  const ProblemKey key = make_problem_key(testing::test_problem());
  // Rank 1's c1 wins (0.5x its default of 80); rank 0's default runs at 100.
  run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    Tuner tuner(grouped_options(registry, group, AgreementStrategy::split_configs, rank == 0 ? dir.str() : ""));
    ScriptedRunner runner(rank == 0 ? std::map<std::string, double>{{"c0", 100}, {"c2", 100}}
                                    : std::map<std::string, double>{{"c0", 80}, {"c1", 40}, {"c3", 80}});
    return RankResult{tuner.choose(key, &runner).config->id, ChoiceSource::tuned};
  });
  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  EXPECT_TRUE(reloaded.cache_problems().empty());
  EXPECT_EQ(reloaded.choose(key, nullptr).config->id, "c1");
  const CacheLoad load = read_cache_file(cache_file_path(dir.path(), reloaded.device()), &reloaded.device());
  for (const auto& t : load.contents.timings) {
    if (t.config == "c0") {
      EXPECT_DOUBLE_EQ(t.median_us, 80.0) << "rank 1's default, which c1 was compared with";
    }
  }
}

TEST(TuneRanks, RanksWithDifferentCachesFollowTheRoot) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40, 50, 60});
  const ProblemKey key = make_problem_key(testing::test_problem());
  // Each rank's own cache folder holds a different winner; rank 3 has none.
  std::vector<std::unique_ptr<TempDir>> dirs;
  for (int rank = 0; rank < 4; ++rank) {
    dirs.push_back(std::make_unique<TempDir>());
    if (rank == 3) continue;
    Tuner alone(testing::test_options(registry, testing::fast_settings(TuneMode::on, dirs.back()->str())));
    ScriptedRunner runner(timings_of_rank(rank));
    ASSERT_EQ(alone.choose(key, &runner).config->id, testing::config_id(static_cast<size_t>(rank + 1)));
  }
  for (const auto strategy : {AgreementStrategy::root_tunes, AgreementStrategy::split_configs}) {
    std::atomic<int> calls = 0;
    const auto results = run_ranks(4, [&](int rank, std::shared_ptr<RankGroup> group) {
      Tuner tuner(grouped_options(registry, group, strategy, dirs[static_cast<size_t>(rank)]->str()));
      ScriptedRunner runner(timings_of_rank(rank));
      const TuneChoice choice = tuner.choose(key, &runner);
      if (runner.total_calls() > 0) calls += 1;
      return RankResult{choice.config->id, choice.source};
    });
    for (const auto& r : results) {
      EXPECT_EQ(r.config, "c1") << strategy_name(strategy);
      EXPECT_EQ(r.source, ChoiceSource::cached);
    }
    EXPECT_EQ(calls, 0);
  }
}

TEST(TuneRanks, LoadOnlyRanksAgreeOnTheRootsDefaultWithoutBenchmarking) {
  const auto registry = testing::scripted_registry({10, 20, 30, 40, 50, 60});
  const ProblemKey key = make_problem_key(testing::test_problem());
  std::atomic<int> calls = 0;
  const auto results = run_ranks(2, [&](int rank, std::shared_ptr<RankGroup> group) {
    TunerOptions options = grouped_options(registry, group, AgreementStrategy::split_configs);
    options.settings.mode = TuneMode::load_only;
    Tuner tuner(options);
    ScriptedRunner runner(timings_of_rank(rank));
    const TuneChoice choice = tuner.choose(key, &runner);
    if (runner.total_calls() > 0) ++calls;
    return RankResult{choice.config->id, choice.source};
  });
  EXPECT_EQ(results[0].config, "c0");
  EXPECT_EQ(results[1].config, "c0");
  EXPECT_EQ(calls, 0);
}

TEST(TuneRanks, AgreedChoicesAreHitsWithoutFurtherCollectives) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  ThreadGroupState state(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Tuner tuner(
          grouped_options(registry, std::make_shared<ThreadRankGroup>(state, rank), AgreementStrategy::root_tunes));
      ScriptedRunner runner(timings_of_rank(rank));
      tuner.choose(key, &runner);
      for (int i = 0; i < 10; ++i) EXPECT_EQ(tuner.choose(key, &runner).source, ChoiceSource::cached);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(state.broadcasts, 1);
}

TEST(TuneRanks, ARootWhoseConfigsAllFailStillLeadsEveryRankToTheDefault) {
  const auto registry = testing::scripted_registry({10, 20, 30});
  const ProblemKey key = make_problem_key(testing::test_problem());
  const auto results = run_ranks(3, [&](int rank, std::shared_ptr<RankGroup> group) {
    Tuner tuner(grouped_options(registry, group, AgreementStrategy::root_tunes));
    ScriptedRunner runner(timings_of_rank(rank),
                          rank == 0 ? std::set<std::string>{"c0", "c1", "c2"} : std::set<std::string>{});
    return RankResult{tuner.choose(key, &runner).config->id, ChoiceSource::tuned};
  });
  for (const auto& r : results) EXPECT_EQ(r.config, "c0");
}

}  // namespace
}  // namespace attnkit::tune
