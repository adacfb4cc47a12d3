// CPU attention throughput through the public API (attnkit::attention_forward / attention_backward
// with Backend::cpu), fp32, B=1, H=4, D=64. Reports useful GFLOP/s as DESIGN §5 counts them:
// 4 * B * H * pairs * D forward, 2.5x that backward, where pairs = attended (query, key) pairs
// (counted once from the reference's explicit mask). Threads = OpenMP's default (OMP_NUM_THREADS).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/attention_shape.hpp"
#include "cpu/attention_reference.hpp"

namespace {

using attnkit::AttentionMask;
using attnkit::DType;

struct Problem {
  std::vector<int64_t> tokens;
  int64_t batch = 1, heads = 4, head_dim = 64;
  std::vector<float> q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v;
  attnkit::AttentionForward forward;
  attnkit::AttentionBackward backward;
  double pairs = 0;  // attended (query, key) pairs per (batch, head)

  Problem(std::vector<int64_t> token_extents, AttentionMask mask) : tokens(std::move(token_extents)) {
    int64_t seq = 1;
    for (int64_t t : tokens) seq *= t;
    const auto size = static_cast<size_t>(batch * seq * heads * head_dim);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto* x : {&q, &k, &v, &out, &grad_out, &grad_q, &grad_k, &grad_v}) {
      x->resize(size);
      for (float& e : *x) e = uniform(rng);
    }
    lse.resize(static_cast<size_t>(batch * seq * heads));
    std::vector<int64_t> extents{batch};
    extents.insert(extents.end(), tokens.begin(), tokens.end());
    extents.push_back(heads);
    const auto rank = static_cast<int32_t>(extents.size());
    const auto lse_view = attnkit::make_view(lse.data(), DType::f32, rank, extents.data());
    extents.push_back(head_dim);
    auto view = [&](std::vector<float>& x) {
      return attnkit::make_view(x.data(), DType::f32, rank + 1, extents.data());
    };
    forward = {view(q), view(k), view(v), view(out), lse_view, {}, mask};
    backward = {view(q),      view(k),      view(v),      view(out), lse_view, view(grad_out),
                view(grad_q), view(grad_k), view(grad_v), {},        mask,     false};
    const auto shape = attnkit::detail::describe_attention(forward.q, forward.k, forward.v, forward.scale);
    for (uint8_t visible : attnkit::cpu::reference::explicit_attention_mask(mask, shape, 0, 0)) pairs += visible;
    attnkit::attention_forward(forward, cpu_options());  // out and lse for the backward
  }

  static attnkit::RunOptions cpu_options() {
    attnkit::RunOptions options;
    options.backend = attnkit::Backend::cpu;
    return options;
  }
  double forward_flops() const { return 4.0 * static_cast<double>(batch * heads * head_dim) * pairs; }
};

void report(benchmark::State& state, double flops_per_call) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_call * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_CpuAttentionForward(benchmark::State& state, std::vector<int64_t> tokens, AttentionMask mask) {
  Problem p(std::move(tokens), mask);
  for (auto _ : state) {
    attnkit::attention_forward(p.forward, Problem::cpu_options());
    benchmark::ClobberMemory();
  }
  report(state, p.forward_flops());
}

void BM_CpuAttentionBackward(benchmark::State& state, std::vector<int64_t> tokens, AttentionMask mask) {
  Problem p(std::move(tokens), mask);
  for (auto _ : state) {
    attnkit::attention_backward(p.backward, Problem::cpu_options());
    benchmark::ClobberMemory();
  }
  report(state, 2.5 * p.forward_flops());
}

}  // namespace

BENCHMARK_CAPTURE(BM_CpuAttentionForward, na2d_64x64_k13, std::vector<int64_t>{64, 64},
                  attnkit::neighborhood_mask({13, 13}))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_CpuAttentionBackward, na2d_64x64_k13, std::vector<int64_t>{64, 64},
                  attnkit::neighborhood_mask({13, 13}))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_CpuAttentionForward, dense_1024, std::vector<int64_t>{1024}, AttentionMask{})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_CpuAttentionBackward, dense_1024, std::vector<int64_t>{1024}, AttentionMask{})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
