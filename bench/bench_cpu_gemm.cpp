// CPU GEMM throughput: C = A * B in fp32 (row-major, beta = 0) through the CPU backend, reported as
// GFLOP/s counting 2*M*N*K per call. Default size 512^3; threads = OpenMP's default (OMP_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/gemm.hpp"
#include "cpu/cpu_backend.hpp"

namespace {

void BM_CpuGemmF32(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  attnkit::GemmProblem problem;
  problem.a = attnkit::make_view(a.data(), attnkit::DType::f32, {m, k});
  problem.b = attnkit::make_view(b.data(), attnkit::DType::f32, {k, n});
  problem.c = attnkit::make_view(c.data(), attnkit::DType::f32, {m, n});
  for (auto _ : state) {
    attnkit::cpu::gemm(problem, attnkit::RunOptions{});
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_CpuGemmF32)->Args({512, 512, 512})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
