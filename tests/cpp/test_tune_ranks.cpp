// Multi-rank agreement (DESIGN §6.7): ranks whose own timings disagree still pick one config.
// Each "rank" is a thread with its own Tuner and runner, joined by an in-process RankGroup.
#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <thread>

#include "test_tune_support.hpp"

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

TEST(TuneRanks, SplitConfigsTimesEachConfigOnceAndAllRanksAgree) {
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
  // Rank r times c{r} and c{r+3}; alone it would pick c{r+3} (40 + r us). The gathered timings:
  // c0 100, c1 105, c2 110 (each by its rank), c3 40, c4 41, c5 42 -> every rank picks c3.
  for (const auto& r : results) {
    EXPECT_EQ(r.config, "c3");
    EXPECT_EQ(r.source, ChoiceSource::tuned);
  }
  std::multiset<std::string> all;
  for (const auto& ids : timed) all.insert(ids.begin(), ids.end());
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 6u) << "no config timed twice";
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
