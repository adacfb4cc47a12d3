// The CPU backend asks the process's tuner for its config and runs with it (issue #5): the default
// is the drivers' own choice, a cached or tuned winner is what the call runs, and the settings
// (mode, deterministic, direction toggles) decide whether anything is timed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "attnkit/tuner.hpp"
#include "cpu/attention_config.hpp"
#include "cpu/tune/cpu_attention_runner.hpp"
#include "cpu/tune/host_mask_density.hpp"
#include "test_cpu_attention_problem.hpp"
#include "test_tune_support.hpp"
#include "tune/cache_file.hpp"
#include "tune/lazy_runner.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit {
namespace {

using test::AttentionCase;
using test::AttentionTensors;
using tune::testing::ScriptedRunner;
using tune::testing::TempDir;

// Every test starts from a fresh process state and leaves one behind.
class TunerDispatch : public ::testing::Test {
 protected:
  void SetUp() override { tune::reset_process_tuners(); }
  void TearDown() override { tune::reset_process_tuners(); }

  // Fast settings: one warm-up, one to three timed runs, two candidates.
  static TunerSettings fast(TuneMode mode, const std::string& dir) {
    TunerSettings s;
    s.mode = mode;
    s.warmup_steps_forward = s.warmup_steps_backward = 0;
    s.steps_forward = s.steps_backward = 2;
    s.top_k = 2;
    s.cache_dir = dir;
    return s;
  }
};

AttentionCase small_case(uint64_t seed = 3) {
  AttentionCase c;
  c.batch = 1;
  c.tokens = {45};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = 16;
  c.dtype = DType::f32;
  c.mask.kind = MaskKind::causal;
  c.seed = seed;
  return c;
}

// The CPU device key and limits the process tuner uses, for tuners built by the tests.
tune::TunerOptions process_like_options(const std::string& dir, tune::TuneMode mode) {
  tune::TunerOptions options;
  options.registry = &tune::builtin_config_spaces();
  options.device = tune::cpu_device_key(0, *options.registry);
  options.limits = tune::cpu_device_limits(options.device.processors);
  options.settings.mode = mode;
  options.settings.cache_dir = dir;
  options.settings.warmup_steps_forward = options.settings.warmup_steps_backward = 0;
  options.settings.steps_forward = options.settings.steps_backward = 3;
  options.settings.min_steps = 3;
  return options;
}

tune::ProblemKey forward_key(const AttentionTensors& t) {
  const AttentionForward f = t.forward_problem();
  return tune::make_problem_key(
      tune::attention_problem_spec(tune::TuneOp::attention_forward, f.q.dtype, t.shape(), f.mask, 1.0));
}

TEST_F(TunerDispatch, UntunedCallsRunTheDriversDefaultConfig) {
  configure_tuner(fast(TuneMode::load_only, ""));
  AttentionTensors t(small_case());
  EXPECT_EQ(attention_forward_config(t.forward_problem()).name, "q32-all");
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "default");
  t.run_forward();
  t.run_backward();
  EXPECT_EQ(attention_backward_config(t.backward_problem()).name, "q128-all");
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().query_block, cpu::kDefaultBackwardQueryBlock);
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().threads, 0);
}

TEST_F(TunerDispatch, AWinnerFromInjectedTimingsIsWhatTheCallRuns) {
  TempDir dir;
  AttentionTensors t(small_case());
  {
    // A tuner of this CPU whose runner says q64-t1 is far the fastest; it saves the winner.
    tune::Tuner tuner(process_like_options(dir.str(), tune::TuneMode::on));
    ScriptedRunner runner({{"q32-all", 500.0}, {"q64-t1", 50.0}});
    tune::TunerSettings thorough = tuner.settings();
    thorough.thorough_mode_forward = true;
    tuner.update_settings(thorough);
    const tune::TuneChoice choice = tuner.choose(forward_key(t), &runner);
    ASSERT_EQ(choice.config->id, "q64-t1");
    EXPECT_EQ(choice.source, tune::ChoiceSource::tuned);
  }
  configure_tuner(fast(TuneMode::load_only, dir.str()));
  const TunedConfig config = attention_forward_config(t.forward_problem());
  EXPECT_EQ(config.name, "q64-t1");
  EXPECT_EQ(config.source, "cache");
  t.run_forward();
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().query_block, 64);
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().threads, 1);
}

TEST_F(TunerDispatch, ModeOnTunesANewProblemOnItsFirstCallAndReusesTheWinner) {
  TempDir dir;
  configure_tuner(fast(TuneMode::on, dir.str()));
  AttentionTensors t(small_case());
  const TunedConfig first = attention_forward_config(t.forward_problem());
  EXPECT_EQ(first.source, "tuned");
  const TunedConfig second = attention_forward_config(t.forward_problem());
  EXPECT_EQ(second.source, "cache");
  EXPECT_EQ(second.name, first.name);
  // The result is on disk for the next process.
  bool found = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    found = found || entry.path().extension() == ".json";
  }
  EXPECT_TRUE(found);
}

TEST_F(TunerDispatch, TheFirstCallOfANewProblemTunesAndStillComputesTheRightResult) {
  TempDir dir;
  configure_tuner(fast(TuneMode::on, dir.str()));
  AttentionCase c = small_case(11);
  c.strided = true;
  c.tokens = {5, 9};
  c.mask = AttentionMask{};
  c.mask.kind = MaskKind::neighborhood;
  c.mask.dims = 2;
  c.mask.neighborhood[0] = {3, 1, 1, false};
  c.mask.neighborhood[1] = {5, 1, 2, false};
  AttentionTensors t(c);
  t.run_forward();
  t.run_reference_forward();
  EXPECT_LE(test::relative_l2(t.out.view, t.ref_out.view), 1e-5);
  EXPECT_FALSE(test::any_nan(t.out.view));
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "cache");
}

TEST_F(TunerDispatch, ForwardResultsAreIdenticalForEveryQueryBlock) {
  AttentionCase c = small_case(5);
  c.tokens = {77};
  c.strided = true;
  AttentionTensors t(c);
  const AttentionForward f = t.forward_problem();
  std::vector<std::vector<double>> outputs;
  for (const int64_t block : {16, 32, 64, 128}) {
    test::poison_nan(t.out.view);
    cpu::attention_forward_configured(f, t.shape(), RunOptions{}, cpu::CpuAttentionConfig{block, 0});
    outputs.push_back(test::to_doubles(t.out.view));
  }
  for (size_t i = 1; i < outputs.size(); ++i) EXPECT_EQ(outputs[i], outputs[0]) << "query block #" << i;
}

TEST_F(TunerDispatch, BackwardAgreesWithTheReferenceForEveryQueryBlock) {
  AttentionCase c = small_case(6);
  c.tokens = {301};
  c.dtype = DType::f64;
  AttentionTensors t(c);
  t.run_forward();
  t.run_reference_backward();
  const AttentionBackward b = t.backward_problem();
  for (const int64_t block : {16, 32, 64, 128}) {
    test::poison_nan(t.grad_q.view);
    test::poison_nan(t.grad_k.view);
    test::poison_nan(t.grad_v.view);
    cpu::attention_backward_configured(b, t.shape(), RunOptions{}, cpu::CpuAttentionConfig{block, 2});
    EXPECT_LE(test::relative_l2(t.grad_q.view, t.ref_grad_q.view), 1e-10) << block;
    EXPECT_LE(test::relative_l2(t.grad_k.view, t.ref_grad_k.view), 1e-10) << block;
    EXPECT_LE(test::relative_l2(t.grad_v.view, t.ref_grad_v.view), 1e-10) << block;
  }
}

TEST_F(TunerDispatch, DeterministicModeNeverTimesAndWritesNothing) {
  TempDir dir;
  TunerSettings s = fast(TuneMode::on, dir.str());
  s.deterministic = true;
  configure_tuner(s);
  AttentionTensors t(small_case());
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "default");
  t.run_forward();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST_F(TunerDispatch, BackwardToggleOffLeavesBackwardUntunedWhileForwardTunes) {
  TempDir dir;
  TunerSettings s = fast(TuneMode::on, dir.str());
  s.backward_pass = false;
  configure_tuner(s);
  AttentionTensors t(small_case());
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "tuned");
  EXPECT_EQ(attention_backward_config(t.backward_problem()).source, "default");
  EXPECT_EQ(attention_backward_config(t.backward_problem()).name, "q128-all");
}

TEST_F(TunerDispatch, OffModeIgnoresACachedWinner) {
  TempDir dir;
  AttentionTensors t(small_case());
  {
    tune::Tuner tuner(process_like_options(dir.str(), tune::TuneMode::on));
    ScriptedRunner runner({{"q32-all", 500.0}, {"q16-t1", 10.0}});
    tune::TunerSettings thorough = tuner.settings();
    thorough.thorough_mode_forward = true;
    tuner.update_settings(thorough);
    ASSERT_EQ(tuner.choose(forward_key(t), &runner).config->id, "q16-t1");
  }
  configure_tuner(fast(TuneMode::off, dir.str()));
  EXPECT_EQ(attention_forward_config(t.forward_problem()).name, "q32-all");
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "default");
}

TEST_F(TunerDispatch, ChangingStepsKeepsInMemoryWinnersButChangingTheFolderDropsThem) {
  configure_tuner(fast(TuneMode::on, ""));
  AttentionTensors t(small_case());
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "tuned");
  TunerSettings more_steps = fast(TuneMode::on, "");
  more_steps.steps_forward = 7;
  configure_tuner(more_steps);
  EXPECT_EQ(tuner_settings().steps_forward, 7);
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "cache");
  TempDir dir;
  configure_tuner(fast(TuneMode::on, dir.str()));
  EXPECT_EQ(attention_forward_config(t.forward_problem()).source, "tuned");
}

TEST_F(TunerDispatch, ACapturingCallerNeverBuildsARunnerOrTimes) {
  tune::Tuner tuner(process_like_options("", tune::TuneMode::on));
  AttentionTensors t(small_case());
  bool built = false;
  tune::LazyRunner runner([&built]() -> std::unique_ptr<tune::Runner> {
    built = true;
    return std::make_unique<ScriptedRunner>(std::map<std::string, double>{});
  });
  const tune::TuneChoice during = tuner.choose(forward_key(t), &runner, /*capturing=*/true);
  EXPECT_EQ(during.source, tune::ChoiceSource::default_config);
  EXPECT_EQ(during.config->id, "q32-all");
  EXPECT_FALSE(built);
  // The first call outside capture tunes.
  EXPECT_EQ(tuner.choose(forward_key(t), &runner, /*capturing=*/false).source, tune::ChoiceSource::tuned);
  EXPECT_TRUE(built);
}

TEST_F(TunerDispatch, ACallersThreadCountWinsOverTheConfigs) {
  cpu::CpuAttentionConfig config{64, 1};
  EXPECT_EQ(cpu::with_config_threads(RunOptions{Backend::cpu, nullptr, 3}, config).num_threads, 3);
  EXPECT_EQ(cpu::with_config_threads(RunOptions{Backend::cpu, nullptr, 0}, config).num_threads, 1);
  EXPECT_EQ(cpu::with_config_threads(RunOptions{Backend::cpu, nullptr, 0}, cpu::CpuAttentionConfig{}).num_threads, 0);
}

TEST_F(TunerDispatch, SparseKeysCarryTheHostMasksDensity) {
  std::mt19937_64 rng(9);
  test::HostTensor blocks = test::HostTensor::padded(DType::boolean, {1, 1, 6, 10});
  test::fill_value(blocks.view, 0.0);
  for (int64_t c = 0; c < 10; ++c) test::set_element(blocks.view, {0, 0, 2, c}, 1.0);  // 10 of 60 true
  AttentionMask mask;
  mask.kind = MaskKind::block;
  mask.block_mask = blocks.view;
  mask.block_q = mask.block_k = 16;
  EXPECT_NEAR(tune::host_mask_density(mask), 10.0 / 60.0, 1e-12);
  mask.kind = MaskKind::causal;
  EXPECT_EQ(tune::host_mask_density(mask), 1.0);
}

TEST_F(TunerDispatch, ALargeElementMasksDensityIsEstimatedFromSpacedRows) {
  test::HostTensor elements = test::HostTensor::contiguous(DType::boolean, {1, 2, 1500, 1500});
  std::mt19937_64 rng(4);
  test::fill_random_bool(elements.view, rng, 0.2);
  AttentionMask mask;
  mask.kind = MaskKind::element;
  mask.element_mask = elements.view;
  EXPECT_NEAR(tune::host_mask_density(mask), 0.2, 0.01);
}

TEST_F(TunerDispatch, TheCpuRunnerTimesTheConfigItIsGivenWithoutAskingTheTuner) {
  // Tuning in mode on inside a call would deadlock if the runner went back through the tuner.
  configure_tuner(fast(TuneMode::on, ""));
  tune::ProblemSpec spec = tune::testing::test_problem(40, tune::TuneOp::attention_backward);
  spec.dtype = DType::f32;
  tune::CpuAttentionRunner runner(spec, 2, 7);
  const tune::ConfigSpace* space = tune::builtin_config_spaces().find(tune::TuneOp::attention_backward, Backend::cpu);
  ASSERT_NE(space, nullptr);
  EXPECT_GT(runner.measure_seconds(*space->find("q16-t1"), 0), 0.0);
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().query_block, 16);
  EXPECT_EQ(cpu::last_attention_config_on_this_thread().threads, 1);
}

}  // namespace
}  // namespace attnkit
