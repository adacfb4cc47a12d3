// The tuner's C ABI (attnkit_tuner_* in attnkit.h): settings round-trip and are checked, the config
// query names the CPU config a call runs with, and a rank group made of C callbacks makes ranks
// (threads here) agree on one config even when each alone would pick another.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attnkit.h"
#include "capi/c_api_convert.hpp"
#include "capi/c_api_tuner.hpp"
#include "test_support.hpp"
#include "test_tune_support.hpp"
#include "tune/collectives_rank_group.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit {
namespace {

using test::HostTensor;
using tune::testing::ScriptedRunner;

class TunerCAbi : public ::testing::Test {
 protected:
  void SetUp() override { tune::reset_process_tuners(); }
  void TearDown() override { tune::reset_process_tuners(); }
};

attnkit_tuner_settings unusual_settings(const char* dir) {
  attnkit_tuner_settings s{};
  s.mode = ATTNKIT_TUNE_ON;
  s.deterministic = 1;
  s.forward_pass = 0;
  s.backward_pass = 1;
  s.thorough_mode_forward = 1;
  s.thorough_mode_backward = 0;
  s.warmup_steps_forward = 3;
  s.warmup_steps_backward = 7;
  s.steps_forward = 11;
  s.steps_backward = 13;
  s.top_k = 6;
  s.cache_dir = dir;
  return s;
}

TEST_F(TunerCAbi, SettingsRoundTrip) {
  tune::testing::TempDir dir;
  const std::string folder = dir.str();
  const attnkit_tuner_settings in = unusual_settings(folder.c_str());
  ASSERT_EQ(attnkit_tuner_configure(&in), ATTNKIT_OK) << attnkit_last_error();
  attnkit_tuner_settings out{};
  ASSERT_EQ(attnkit_tuner_get_settings(&out), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(out.mode, in.mode);
  EXPECT_EQ(out.deterministic, 1);
  EXPECT_EQ(out.forward_pass, 0);
  EXPECT_EQ(out.backward_pass, 1);
  EXPECT_EQ(out.thorough_mode_forward, 1);
  EXPECT_EQ(out.thorough_mode_backward, 0);
  EXPECT_EQ(out.warmup_steps_forward, 3);
  EXPECT_EQ(out.warmup_steps_backward, 7);
  EXPECT_EQ(out.steps_forward, 11);
  EXPECT_EQ(out.steps_backward, 13);
  EXPECT_EQ(out.top_k, 6);
  EXPECT_STREQ(out.cache_dir, folder.c_str());
  // The C++ API sees the same settings.
  EXPECT_EQ(tuner_settings().steps_backward, 13);
  EXPECT_EQ(tuner_settings().mode, TuneMode::on);
}

TEST_F(TunerCAbi, SettingsBeforeAnyConfigureComeFromTheEnvironment) {
  attnkit_tuner_settings out{};
  ASSERT_EQ(attnkit_tuner_get_settings(&out), ATTNKIT_OK);
  const tune::TunerSettings env = tune::settings_from_environment();
  EXPECT_EQ(out.mode, static_cast<int32_t>(env.mode == tune::TuneMode::off  ? ATTNKIT_TUNE_OFF
                                           : env.mode == tune::TuneMode::on ? ATTNKIT_TUNE_ON
                                                                            : ATTNKIT_TUNE_LOAD_ONLY));
  EXPECT_STREQ(out.cache_dir, env.cache_dir.c_str());
  EXPECT_EQ(out.top_k, 4);
}

TEST_F(TunerCAbi, ConfigureRejectsAnUnknownModeNamingTheField) {
  attnkit_tuner_settings s = unusual_settings("");
  s.mode = 7;
  EXPECT_EQ(attnkit_tuner_configure(&s), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("settings.mode: 7"), std::string::npos) << attnkit_last_error();
}

TEST_F(TunerCAbi, ConfigureRejectsZeroTimedStepsAndKeepsTheOldSettings) {
  attnkit_tuner_settings s = unusual_settings("");
  ASSERT_EQ(attnkit_tuner_configure(&s), ATTNKIT_OK);
  s.steps_forward = 0;
  EXPECT_EQ(attnkit_tuner_configure(&s), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("steps_forward"), std::string::npos) << attnkit_last_error();
  EXPECT_EQ(tuner_settings().steps_forward, 11);
}

TEST_F(TunerCAbi, NullArgumentsAreRejected) {
  EXPECT_EQ(attnkit_tuner_configure(nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_tuner_get_settings(nullptr), ATTNKIT_INVALID_ARGUMENT);
}

struct ForwardArgs {
  HostTensor q, k, v, out;
  attnkit_attention_forward_args args{};
};

ForwardArgs small_forward_args() {
  std::mt19937_64 rng(21);
  ForwardArgs f;
  f.q = HostTensor::padded(DType::f32, {1, 19, 2, 8});
  f.k = HostTensor::contiguous(DType::f32, {1, 19, 2, 8});
  f.v = HostTensor::contiguous(DType::f32, {1, 19, 2, 8});
  f.out = HostTensor::contiguous(DType::f32, {1, 19, 2, 8});
  for (const TensorView& view : {f.q.view, f.k.view, f.v.view}) test::fill_random(view, rng);
  attnkit_attention_forward_args_init(&f.args);
  f.args.q = capi::to_c_tensor(f.q.view);
  f.args.k = capi::to_c_tensor(f.k.view);
  f.args.v = capi::to_c_tensor(f.v.view);
  f.args.out = capi::to_c_tensor(f.out.view);
  f.args.mask.kind = ATTNKIT_MASK_CAUSAL;
  return f;
}

TEST_F(TunerCAbi, ConfigQueryNamesTheCpuConfigAndItsSource) {
  attnkit_tuner_settings s = unusual_settings("");
  s.mode = ATTNKIT_TUNE_LOAD_ONLY;
  s.deterministic = 0;
  ASSERT_EQ(attnkit_tuner_configure(&s), ATTNKIT_OK);
  ForwardArgs f = small_forward_args();
  char name[64];
  char source[16];
  ASSERT_EQ(attnkit_attention_forward_config(&f.args, nullptr, name, sizeof name, source, sizeof source), ATTNKIT_OK)
      << attnkit_last_error();
  EXPECT_STREQ(name, "q32-all");
  EXPECT_STREQ(source, "default");
}

TEST_F(TunerCAbi, ConfigQueryRejectsANameBufferTooSmall) {
  ForwardArgs f = small_forward_args();
  char name[4];
  EXPECT_EQ(attnkit_attention_forward_config(&f.args, nullptr, name, sizeof name, nullptr, 0),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("name_capacity: 4"), std::string::npos) << attnkit_last_error();
}

TEST_F(TunerCAbi, ConfigQueryValidatesTheProblemLikeTheCall) {
  ForwardArgs f = small_forward_args();
  f.args.k.extents[3] = 4;  // head dim of k differs from q's
  f.args.k.strides[2] = 4;
  f.args.k.strides[1] = 8;
  char name[64];
  EXPECT_EQ(attnkit_attention_forward_config(&f.args, nullptr, name, sizeof name, nullptr, 0),
            ATTNKIT_INVALID_ARGUMENT);
}

TEST_F(TunerCAbi, RankGroupRejectsARankOutsideTheGroup) {
  attnkit_rank_group group{};
  group.rank = 2;
  group.size = 2;
  group.broadcast = [](void*, const char*, int64_t, int32_t, attnkit_bytes*) { return 0; };
  group.all_gather = [](void*, const char*, int64_t, attnkit_bytes**) { return 0; };
  EXPECT_EQ(attnkit_tuner_set_rank_group(&group), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_tuner_set_rank_group(nullptr), ATTNKIT_OK);
}

TEST_F(TunerCAbi, RankGroupRejectsAnUnknownAgreement) {
  attnkit_rank_group group{};
  group.size = 1;
  group.agreement = 5;
  EXPECT_EQ(attnkit_tuner_set_rank_group(&group), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("group.agreement: 5"), std::string::npos);
}

// Two threads pretending to be ranks: C callbacks over a barrier and one slot per rank.
struct ThreadCollectives {
  explicit ThreadCollectives(int size) : sync(size), slots(static_cast<size_t>(size)) {}
  std::barrier<> sync;
  std::vector<std::string> slots;
};

struct RankContext {
  ThreadCollectives* shared;
  int rank;
};

int32_t c_broadcast(void* context, const char* data, int64_t size, int32_t root, attnkit_bytes* result) {
  auto* c = static_cast<RankContext*>(context);
  if (c->rank == root) c->shared->slots[static_cast<size_t>(root)].assign(data, static_cast<size_t>(size));
  c->shared->sync.arrive_and_wait();
  const std::string& value = c->shared->slots[static_cast<size_t>(root)];
  attnkit_bytes_append(result, value.data(), static_cast<int64_t>(value.size()));
  c->shared->sync.arrive_and_wait();
  return 0;
}

int32_t c_all_gather(void* context, const char* data, int64_t size, attnkit_bytes** results) {
  auto* c = static_cast<RankContext*>(context);
  c->shared->slots[static_cast<size_t>(c->rank)].assign(data, static_cast<size_t>(size));
  c->shared->sync.arrive_and_wait();
  for (size_t r = 0; r < c->shared->slots.size(); ++r) {
    attnkit_bytes_append(results[r], c->shared->slots[r].data(), static_cast<int64_t>(c->shared->slots[r].size()));
  }
  c->shared->sync.arrive_and_wait();
  return 0;
}

void expect_ranks_agree(int32_t agreement) {
  constexpr int kRanks = 2;
  ThreadCollectives shared(kRanks);
  const tune::ConfigSpaceRegistry registry = tune::testing::scripted_registry({10, 20, 30, 40, 50, 60});
  std::vector<std::string> winners(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      RankContext context{&shared, rank};
      attnkit_rank_group c_group{};
      c_group.rank = rank;
      c_group.size = kRanks;
      c_group.agreement = agreement;
      c_group.context = &context;
      c_group.broadcast = c_broadcast;
      c_group.all_gather = c_all_gather;
      tune::TunerOptions options =
          tune::testing::test_options(registry, tune::testing::fast_settings(tune::TuneMode::on));
      options.settings.thorough_mode_forward = true;
      options.group = tune::rank_group_from_collectives(capi::to_collectives(c_group));
      options.agreement = agreement == ATTNKIT_AGREE_SPLIT_CONFIGS ? tune::AgreementStrategy::split_configs
                                                                   : tune::AgreementStrategy::root_tunes;
      tune::Tuner tuner(options);
      // Alone, rank 0 would pick c3 and rank 1 c5.
      std::map<std::string, double> timings{{"c0", 100}, {"c1", 100}, {"c2", 100},
                                            {"c3", 100}, {"c4", 100}, {"c5", 100}};
      timings[rank == 0 ? "c3" : "c5"] = 20;
      ScriptedRunner runner(timings);
      winners[static_cast<size_t>(rank)] =
          tuner.choose(tune::make_problem_key(tune::testing::test_problem()), &runner).config->id;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners[0], winners[1]);
  EXPECT_FALSE(winners[0].empty());
}

TEST_F(TunerCAbi, RanksJoinedByCCallbacksAgreeWhenTheRootTunes) { expect_ranks_agree(ATTNKIT_AGREE_ROOT_TUNES); }

TEST_F(TunerCAbi, RanksJoinedByCCallbacksAgreeWhenTheySplitTheConfigs) {
  expect_ranks_agree(ATTNKIT_AGREE_SPLIT_CONFIGS);
}

TEST_F(TunerCAbi, AFailingCallbackBecomesAnErrorNotACrash) {
  attnkit_rank_group c_group{};
  c_group.rank = 0;
  c_group.size = 2;
  c_group.broadcast = [](void*, const char*, int64_t, int32_t, attnkit_bytes*) { return 3; };
  c_group.all_gather = [](void*, const char*, int64_t, attnkit_bytes**) { return 3; };
  RankCollectives collectives = capi::to_collectives(c_group);
  std::string bytes = "plan";
  try {
    collectives.broadcast(bytes, 0);
    ADD_FAILURE() << "a failing broadcast callback must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::internal);
    EXPECT_NE(std::string(e.what()).find("broadcast callback returned 3"), std::string::npos);
  }
}

TEST_F(TunerCAbi, BytesAppendConcatenates) {
  attnkit_rank_group c_group{};
  c_group.size = 2;
  c_group.broadcast = [](void*, const char*, int64_t, int32_t, attnkit_bytes* result) {
    attnkit_bytes_append(result, "ab", 2);
    attnkit_bytes_append(result, "cd", 2);
    attnkit_bytes_append(result, nullptr, 5);  // ignored
    return 0;
  };
  c_group.all_gather = [](void*, const char*, int64_t, attnkit_bytes**) { return 0; };
  std::string bytes = "x";
  capi::to_collectives(c_group).broadcast(bytes, 0);
  EXPECT_EQ(bytes, "abcd");
}

}  // namespace
}  // namespace attnkit
