// The tuner's hit path (DESIGN §6.1: a cache hit costs < 5 us): Tuner::choose for a problem whose
// winner is known, with the key precomputed (what a kernel launcher that keeps its key does), with
// the key built from the problem spec on every call (what a plain API call does), and with many
// problems in the cache; and the whole dispatch of a CPU attention call (key from the call's shape,
// the process's CPU tuner, its answer), which every call pays before its kernels run.
#include <benchmark/benchmark.h>

#include <vector>

#include "attnkit/tuner.hpp"
#include "core/attention_shape.hpp"
#include "cpu/tune/cpu_attention_dispatch.hpp"
#include "tune/config_space_registry.hpp"
#include "tune/device_key.hpp"
#include "tune/process_tuners.hpp"
#include "tune/tuner.hpp"

namespace {

using namespace attnkit;
using namespace attnkit::tune;

class ConstantRunner : public Runner {
 public:
  double measure_seconds(const Config& config, int) override {
    return 1e-3 * (1.0 + static_cast<double>(config.param("query_block")) / 1024.0);
  }
};

ProblemSpec problem(int64_t length) {
  ProblemSpec spec;
  spec.op = TuneOp::attention_forward;
  spec.dtype = DType::bf16;
  spec.batch = 4;
  spec.heads_q = 16;
  spec.heads_kv = 4;
  spec.head_dim = 128;
  spec.head_dim_v = 128;
  spec.tokens = {length, 1, 1};
  spec.tokens_kv = {length, 1, 1};
  spec.mask = MaskKind::causal;
  return spec;
}

std::unique_ptr<Tuner> tuner_with(const std::vector<ProblemKey>& keys) {
  TunerOptions options;
  options.registry = &builtin_config_spaces();
  options.device = cpu_device_key(0, *options.registry);
  options.limits = cpu_device_limits(options.device.processors);
  options.settings.mode = tune::TuneMode::on;
  options.settings.cache_dir = "";  // memory only
  options.settings.warmup_steps_forward = 0;
  options.settings.steps_forward = options.settings.min_steps = 1;
  auto tuner = std::make_unique<Tuner>(options);
  ConstantRunner runner;
  for (const auto& key : keys) tuner->tune(key, runner);
  return tuner;
}

void BM_TunerHitPrecomputedKey(benchmark::State& state) {
  const ProblemKey key = make_problem_key(problem(4096));
  const auto tuner = tuner_with({key});
  for (auto _ : state) {
    const TuneChoice choice = tuner->choose(key, nullptr);
    const Config* chosen = choice.config;
    benchmark::DoNotOptimize(chosen);
  }
}
BENCHMARK(BM_TunerHitPrecomputedKey);

void BM_TunerHitBuildingTheKey(benchmark::State& state) {
  const ProblemSpec spec = problem(4000);
  const auto tuner = tuner_with({make_problem_key(spec)});
  for (auto _ : state) {
    const TuneChoice choice = tuner->choose(make_problem_key(spec), nullptr);
    const Config* chosen = choice.config;
    benchmark::DoNotOptimize(chosen);
  }
}
BENCHMARK(BM_TunerHitBuildingTheKey);

void BM_TunerHitAmongManyProblems(benchmark::State& state) {
  std::vector<ProblemKey> keys;
  for (int64_t heads = 1; static_cast<int64_t>(keys.size()) < state.range(0); ++heads) {
    for (int64_t length = 64; length <= 65536 && static_cast<int64_t>(keys.size()) < state.range(0); length *= 2) {
      ProblemSpec spec = problem(length);
      spec.heads_q = spec.heads_kv = heads;
      keys.push_back(make_problem_key(spec));
    }
  }
  const auto tuner = tuner_with(keys);
  size_t i = 0;
  for (auto _ : state) {
    const TuneChoice choice = tuner->choose(keys[i], nullptr);
    const Config* chosen = choice.config;
    benchmark::DoNotOptimize(chosen);
    i = (i + 1) % keys.size();
  }
}
BENCHMARK(BM_TunerHitAmongManyProblems)->Arg(1000);

// A causal CPU forward's config, asked as cpu::attention_forward asks it, with its winner cached.
void BM_CpuDispatchHit(benchmark::State& state) {
  attnkit::TunerSettings settings = tuner_settings();
  settings.mode = attnkit::TuneMode::on;
  settings.cache_dir = "";
  settings.warmup_steps_forward = 0;
  settings.steps_forward = 1;
  configure_tuner(settings);
  std::vector<float> storage(16);
  const int64_t extents[4] = {4, 4096, 16, 128};
  AttentionForward f;
  f.q = f.k = f.v = f.out = make_view(storage.data(), DType::f32, 4, extents);  // never read: no kernel runs
  f.mask.kind = MaskKind::causal;
  const detail::AttentionShape shape = detail::describe_attention(f.q, f.k, f.v, std::nullopt);
  // Seed the winner without timing a 4096-token problem on the CPU.
  const ProblemKey key =
      make_problem_key(attention_problem_spec(TuneOp::attention_forward, DType::f32, shape, f.mask, 1.0));
  ConstantRunner runner;
  cpu_process_tuner()->tune(key, runner);
  for (auto _ : state) {
    const CpuAttentionChoice choice = choose_cpu_attention_forward(f, shape);
    auto chosen = choice.config;
    benchmark::DoNotOptimize(chosen);
  }
  reset_process_tuners();
}
BENCHMARK(BM_CpuDispatchHit);

}  // namespace

BENCHMARK_MAIN();
