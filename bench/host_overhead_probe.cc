// Host time of one tiny attnkit forward call on CUDA, stage by stage (no Google Benchmark).
//
// Problem: q, k, v [1, 128, 1, 64] bf16 on cuda:0 (cudaMalloc, random values), out [1, 128, 1, 64],
// lse [1, 128, 1] float32, no mask, torch's default: the legacy default stream. Each stage runs
// --iters times (20000) back to back after a warm-up; std::chrono::steady_clock around the loop and a
// cudaDeviceSynchronize after it (inside the timed region: the kernels are tiny, so the figure is the
// host's). Median of --reps repetitions (5). A second column, "host chunks", times the same calls in
// chunks of 256 with a cudaDeviceSynchronize between chunks outside the timed region: it stays the
// host's own time even when the GPU would fall behind and the launch queue would fill.
//
// Stages:
//   api      attnkit::attention_forward, attnkit::attention_forward_workspace_size, the C ABI
//   plans    the C ABI's attnkit_plan_run (the Python package's call), the plan key, the plan cache hit,
//            OpPlan::run alone; the backward through the C++ API and through attnkit_plan_run
//   gemm     bf16 C = A B of --gemm-shapes (default 64x4096x4096, the decode-like shape of issue #22, and 128x128x128),
//            A K-major, B MN-major, C row-major (torch's a @ b): attnkit::gemm, the C ABI's attnkit_plan_run with the
//            caller's workspace and without (stream-ordered scratch), OpPlan::run alone, and OpPlan::run on a ring of
//            16 C buffers (more than the 8 launch-parameter entries a Hopper runner keeps: each run points the kept TMA
//            descriptors at another C). The "us" column of a large shape is the GPU's; "host chunks" is the host's.
//   runtime  cudaFuncSetAttribute, cudaStreamIsCapturing, cudaDeviceGetAttribute, cudaGetDevice,
//            cudaGetLastError, an empty kernel launch
// (The copy of this program that measured the host path before the plan layer, at commit 51268eb,
// timed that code's internal stages instead; docs/perf.md keeps both sets of figures.)
//
// Build (on a CUDA machine, after building libattnkit_static.a):
//   nvcc -x cu -std=c++20 -O2 -arch=sm_90a -DATTNKIT_WITH_CUDA=1 -Iinclude -Isrc -I<nlohmann_json include> \
//        bench/host_overhead_probe.cc build/gpu/libattnkit_static.a -lcuda -lgomp -o host_overhead_probe
// -DPROBE_PUBLIC_ONLY leaves out the plan stages.
// Usage: host_overhead_probe [--iters N] [--reps R] [--gemm-shapes MxNxK,MxNxK,...] [--sections attention,gemm,runtime]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"

#include "capi/c_api_convert.hpp"
#ifndef PROBE_PUBLIC_ONLY
#include "core/attention_plan.hpp"
#include "core/gemm_plan.hpp"
#endif

namespace {

__global__ void empty_kernel() {}

struct Row {
  std::string name;
  double us = NAN;         // loop + final cudaDeviceSynchronize, median of reps
  double us_min = NAN;     // the fastest repetition
  double us_chunks = NAN;  // host time only, chunks of 256 with a sync between them (outside the timing)
  std::string error;
};

int g_iters = 20000;
int g_reps = 5;
std::string g_gemm_shapes = "64x4096x4096,128x128x128";
std::string g_sections = "attention,gemm,runtime";

bool section_on(const char* name) {
  return ("," + g_sections + ",").find(std::string(",") + name + ",") != std::string::npos;
}
std::vector<Row> g_rows;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

void stage(const std::string& name, const std::function<void()>& fn) {
  using clock = std::chrono::steady_clock;
  Row row;
  row.name = name;
  try {
    for (int i = 0; i < std::max(200, g_iters / 10); ++i) fn();
    check(cudaDeviceSynchronize(), "warm-up sync");
    std::vector<double> full, chunks;
    for (int r = 0; r < g_reps; ++r) {
      const auto t0 = clock::now();
      for (int i = 0; i < g_iters; ++i) fn();
      check(cudaDeviceSynchronize(), "sync");
      const auto t1 = clock::now();
      full.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / g_iters);
      double host = 0;
      for (int done = 0; done < g_iters;) {
        const int n = std::min(256, g_iters - done);
        const auto c0 = clock::now();
        for (int i = 0; i < n; ++i) fn();
        const auto c1 = clock::now();
        host += std::chrono::duration<double, std::micro>(c1 - c0).count();
        check(cudaDeviceSynchronize(), "chunk sync");
        done += n;
      }
      chunks.push_back(host / g_iters);
    }
    row.us = median(full);
    row.us_min = *std::min_element(full.begin(), full.end());
    row.us_chunks = median(chunks);
    std::printf("  %-66s %9.3f us  (min %8.3f, host chunks %8.3f)\n", name.c_str(), row.us, row.us_min, row.us_chunks);
  } catch (const std::exception& e) {
    row.error = e.what();
    std::printf("  %-66s   FAILED: %s\n", name.c_str(), e.what());
  }
  std::fflush(stdout);
  g_rows.push_back(row);
}

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// The GEMM rows (see the top): bf16 A [M, K] and B [K, N] row-major, C [M, N], on the legacy default stream.
void gemm_section(int64_t m, int64_t n, int64_t k) {
  using namespace attnkit;
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  std::printf("\n== gemm bf16 %s (A K-major, B MN-major, C row-major) ==\n", shape.c_str());
  constexpr int kRing = 16;
  std::vector<uint16_t> host_a(static_cast<size_t>(m * k)), host_b(static_cast<size_t>(k * n));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* h : {&host_a, &host_b})
    for (auto& x : *h) x = to_bf16(normal(rng));
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, host_a.size() * 2), "cudaMalloc a");
  check(cudaMalloc(&b, host_b.size() * 2), "cudaMalloc b");
  check(cudaMemcpy(a, host_a.data(), host_a.size() * 2, cudaMemcpyHostToDevice), "copy a");
  check(cudaMemcpy(b, host_b.data(), host_b.size() * 2, cudaMemcpyHostToDevice), "copy b");
  std::vector<void*> c(kRing, nullptr);
  for (void*& p : c) check(cudaMalloc(&p, static_cast<size_t>(m * n * 2)), "cudaMalloc c");
  const Device cuda0{DeviceType::cuda, 0};
  GemmProblem problem;
  problem.a = make_view(a, DType::bf16, {m, k}, cuda0);
  problem.b = make_view(b, DType::bf16, {k, n}, cuda0);
  problem.c = make_view(c[0], DType::bf16, {m, n}, cuda0);
  RunOptions options;  // automatic backend, legacy default stream, no workspace
  try {
    gemm(problem, options);
    check(cudaDeviceSynchronize(), "sync");
  } catch (const std::exception& e) {
    std::printf("gemm FAILED: %s\n", e.what());
  }
  attnkit_gemm_args c_args;
  attnkit_gemm_args_init(&c_args);
  c_args.a = attnkit::capi::to_c_tensor(problem.a);
  c_args.b = attnkit::capi::to_c_tensor(problem.b);
  c_args.c = attnkit::capi::to_c_tensor(problem.c);
  attnkit_run_options c_options;
  attnkit_run_options_init(&c_options);
  attnkit_plan* c_plan = nullptr;
  if (attnkit_gemm_plan(&c_args, &c_options, 0, &c_plan) != ATTNKIT_OK) {
    std::printf("attnkit_gemm_plan failed: %s\n", attnkit_last_error());
  }
  // The workspace the plan asks for (the C++ API has no workspace query for gemm: the plan's is the same).
  int64_t workspace_bytes = 0;
  if (c_plan != nullptr) (void)attnkit_plan_workspace_size(c_plan, &workspace_bytes);
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, static_cast<size_t>(std::max<int64_t>(workspace_bytes, 256))), "cudaMalloc workspace");
  RunOptions with_workspace = options;
  with_workspace.workspace = workspace;
  with_workspace.workspace_bytes = workspace_bytes;
  void* pointers[3] = {a, b, c[0]};
  stage("gemm " + shape + ": attnkit::gemm (C++ API, caller's workspace)", [&] { gemm(problem, with_workspace); });
  stage("gemm " + shape + ": attnkit::gemm (C++ API, stream-ordered workspace)", [&] { gemm(problem, options); });
  stage("gemm " + shape + ": C ABI attnkit_plan_run (caller's workspace)", [&] {
    if (attnkit_plan_run(c_plan, pointers, 3, nullptr, workspace, workspace_bytes) != ATTNKIT_OK)
      throw Error(Status::internal, attnkit_last_error());
  });
  stage("gemm " + shape + ": C ABI attnkit_plan_run (no workspace: stream-ordered)", [&] {
    if (attnkit_plan_run(c_plan, pointers, 3, nullptr, nullptr, 0) != ATTNKIT_OK)
      throw Error(Status::internal, attnkit_last_error());
  });
#ifndef PROBE_PUBLIC_ONLY
  const auto plan = detail::gemm_plan(problem, options);
  const TunedConfig config = plan->config();
  std::printf("plan's kernel: %s (%s), workspace %lld bytes\n", config.name.c_str(), config.source.c_str(),
              static_cast<long long>(plan->workspace_bytes()));
  stage("gemm " + shape + ": detail::gemm_plan (key + cache hit)", [&] { (void)detail::gemm_plan(problem, options); });
  stage("gemm " + shape + ": OpPlan::run alone (caller's workspace)", [&] { plan->run(problem, with_workspace); });
  int next = 0;
  GemmProblem ring = problem;
  stage("gemm " + shape + ": OpPlan::run, C from a ring of 16 buffers (caller's workspace)", [&] {
    ring.c.data = c[static_cast<size_t>(next)];
    next = (next + 1) % kRing;
    plan->run(ring, with_workspace);
  });
#endif
  attnkit_plan_destroy(c_plan);
  for (void* p : c) cudaFree(p);
  for (void* p : {a, b, workspace}) cudaFree(p);
}
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      g_iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      g_reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--gemm-shapes") && i + 1 < argc)
      g_gemm_shapes = argv[++i];
    else if (!std::strcmp(argv[i], "--sections") && i + 1 < argc)
      g_sections = argv[++i];
  }
  using namespace attnkit;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf("host_overhead_probe: %s (cc %d.%d), runtime %d, driver %d, attnkit %s, %d iterations x %d reps\n",
              props.name, props.major, props.minor, runtime, driver, attnkit_version(), g_iters, g_reps);

  const int64_t B = 1, S = 128, H = 1, D = 64;
  const int64_t n = B * S * H * D;
  std::vector<uint16_t> host_q(n), host_k(n), host_v(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* h : {&host_q, &host_k, &host_v})
    for (auto& x : *h) x = to_bf16(normal(rng));
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr;
  for (void** p : {&q, &k, &v, &out}) check(cudaMalloc(p, n * 2), "cudaMalloc");
  check(cudaMalloc(&lse, B * S * H * 4), "cudaMalloc lse");
  check(cudaMemcpy(q, host_q.data(), n * 2, cudaMemcpyHostToDevice), "copy q");
  check(cudaMemcpy(k, host_k.data(), n * 2, cudaMemcpyHostToDevice), "copy k");
  check(cudaMemcpy(v, host_v.data(), n * 2, cudaMemcpyHostToDevice), "copy v");

  const Device cuda0{DeviceType::cuda, 0};
  AttentionForward problem;
  problem.q = make_view(q, DType::bf16, {B, S, H, D}, cuda0);
  problem.k = make_view(k, DType::bf16, {B, S, H, D}, cuda0);
  problem.v = make_view(v, DType::bf16, {B, S, H, D}, cuda0);
  problem.out = make_view(out, DType::bf16, {B, S, H, D}, cuda0);
  problem.lse = make_view(lse, DType::f32, {B, S, H}, cuda0);
  RunOptions options;  // automatic backend, legacy default stream (torch's default), no workspace
  cudaStream_t stream = nullptr;

  // Correctness of the call being timed: the GPU output against the CPU backend on the same inputs.
  try {
    attention_forward(problem, options);
    check(cudaDeviceSynchronize(), "sync");
    std::vector<uint16_t> gpu_out(n), cpu_out(n);
    std::vector<float> cpu_lse(B * S * H);
    check(cudaMemcpy(gpu_out.data(), out, n * 2, cudaMemcpyDeviceToHost), "copy out");
    AttentionForward ref;
    ref.q = make_view(host_q.data(), DType::bf16, {B, S, H, D});
    ref.k = make_view(host_k.data(), DType::bf16, {B, S, H, D});
    ref.v = make_view(host_v.data(), DType::bf16, {B, S, H, D});
    ref.out = make_view(cpu_out.data(), DType::bf16, {B, S, H, D});
    ref.lse = make_view(cpu_lse.data(), DType::f32, {B, S, H});
    attention_forward(ref, RunOptions{Backend::cpu});
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(from_bf16(gpu_out[i]) - from_bf16(cpu_out[i]))));
    std::printf("check: max |GPU - CPU backend| over out = %.3g\n", worst);
  } catch (const std::exception& e) {
    std::printf("check FAILED: %s\n", e.what());
  }

  attnkit_attention_forward_args c_args;
  attnkit_attention_forward_args_init(&c_args);
  c_args.q = attnkit::capi::to_c_tensor(problem.q);
  c_args.k = attnkit::capi::to_c_tensor(problem.k);
  c_args.v = attnkit::capi::to_c_tensor(problem.v);
  c_args.out = attnkit::capi::to_c_tensor(problem.out);
  c_args.lse = attnkit::capi::to_c_tensor(problem.lse);
  attnkit_run_options c_options;
  attnkit_run_options_init(&c_options);
  int64_t c_bytes = -1;
  if (attnkit_attention_forward_workspace_size(&c_args, &c_options, &c_bytes) != ATTNKIT_OK ||
      attnkit_attention_forward(&c_args, &c_options) != ATTNKIT_OK) {
    std::printf("C ABI call failed: %s\n", attnkit_last_error());
  }
  std::printf("workspace bytes (C ABI): %lld\n", static_cast<long long>(c_bytes));

  if (section_on("attention")) {
    std::printf("\n== public API and C ABI ==\n");
    stage("attnkit::attention_forward (C++ API, total)", [&] { attention_forward(problem, options); });
    stage("attnkit::attention_forward_workspace_size (C++ API, total)",
          [&] { (void)attention_forward_workspace_size(problem, options); });
    stage("C ABI attnkit_attention_forward_workspace_size + attnkit_attention_forward", [&] {
      attnkit_attention_forward_workspace_size(&c_args, &c_options, &c_bytes);
      attnkit_attention_forward(&c_args, &c_options);
    });
    stage("C ABI attnkit_attention_forward", [&] { attnkit_attention_forward(&c_args, &c_options); });
    stage("C ABI attnkit_attention_forward_workspace_size",
          [&] { attnkit_attention_forward_workspace_size(&c_args, &c_options, &c_bytes); });

#ifndef PROBE_PUBLIC_ONLY
    std::printf("\n== plans (the host path since the plan layer) ==\n");
    attnkit_plan* c_plan = nullptr;
    if (attnkit_attention_forward_plan(&c_args, &c_options, 0, &c_plan) != ATTNKIT_OK) {
      std::printf("attnkit_attention_forward_plan failed: %s\n", attnkit_last_error());
    }
    void* pointers[8] = {q, k, v, out, lse, nullptr, nullptr, nullptr};  // block, element mask, rpb absent
    const auto plan = detail::attention_forward_plan(problem, options);
    const TunedConfig config = plan->config();
    std::printf("plan's kernel: %s (%s), workspace %lld bytes\n", config.name.c_str(), config.source.c_str(),
                static_cast<long long>(plan->workspace_bytes()));
    stage("C ABI attnkit_plan_run (what the Python package calls)", [&] {
      if (attnkit_plan_run(c_plan, pointers, 8, nullptr, nullptr, 0) != ATTNKIT_OK)
        throw Error(Status::internal, attnkit_last_error());
    });
    stage("detail::attention_forward_key (build and hash the key)",
          [&] { (void)detail::attention_forward_key(problem, options); });
    stage("detail::attention_forward_plan (key + cache hit)",
          [&] { (void)detail::attention_forward_plan(problem, options); });
    stage("OpPlan::run alone (rebind + launch)", [&] { plan->run(problem, options); });

    // The backward of the same tiny problem (grad_out = out).
    void *grad_q = nullptr, *grad_k = nullptr, *grad_v = nullptr;
    for (void** p : {&grad_q, &grad_k, &grad_v}) check(cudaMalloc(p, n * 2), "cudaMalloc grad");
    AttentionBackward backward;
    backward.q = problem.q;
    backward.k = problem.k;
    backward.v = problem.v;
    backward.out = problem.out;
    backward.lse = problem.lse;
    backward.grad_out = problem.out;
    backward.grad_q = make_view(grad_q, DType::bf16, {B, S, H, D}, cuda0);
    backward.grad_k = make_view(grad_k, DType::bf16, {B, S, H, D}, cuda0);
    backward.grad_v = make_view(grad_v, DType::bf16, {B, S, H, D}, cuda0);
    const int64_t backward_bytes = attention_backward_workspace_size(backward, options);
    void* workspace = nullptr;
    check(cudaMalloc(&workspace, static_cast<size_t>(std::max<int64_t>(backward_bytes, 256))), "cudaMalloc workspace");
    RunOptions with_workspace = options;
    with_workspace.workspace = workspace;
    with_workspace.workspace_bytes = backward_bytes;
    std::printf("backward workspace: %lld bytes\n", static_cast<long long>(backward_bytes));
    stage("attnkit::attention_backward (C++ API, caller's workspace)",
          [&] { attention_backward(backward, with_workspace); });
    stage("attnkit::attention_backward (C++ API, stream-ordered workspace)",
          [&] { attention_backward(backward, options); });
    attnkit_attention_backward_args c_backward;
    attnkit_attention_backward_args_init(&c_backward);
    c_backward.q = attnkit::capi::to_c_tensor(backward.q);
    c_backward.k = attnkit::capi::to_c_tensor(backward.k);
    c_backward.v = attnkit::capi::to_c_tensor(backward.v);
    c_backward.out = attnkit::capi::to_c_tensor(backward.out);
    c_backward.lse = attnkit::capi::to_c_tensor(backward.lse);
    c_backward.grad_out = attnkit::capi::to_c_tensor(backward.grad_out);
    c_backward.grad_q = attnkit::capi::to_c_tensor(backward.grad_q);
    c_backward.grad_k = attnkit::capi::to_c_tensor(backward.grad_k);
    c_backward.grad_v = attnkit::capi::to_c_tensor(backward.grad_v);
    attnkit_plan* c_backward_plan = nullptr;
    if (attnkit_attention_backward_plan(&c_backward, &c_options, 0, &c_backward_plan) != ATTNKIT_OK) {
      std::printf("attnkit_attention_backward_plan failed: %s\n", attnkit_last_error());
    }
    void* backward_pointers[13] = {q, k, v, out, lse, out, grad_q, grad_k, grad_v, nullptr, nullptr, nullptr, nullptr};
    stage("C ABI attnkit_plan_run, backward (caller's workspace)", [&] {
      if (attnkit_plan_run(c_backward_plan, backward_pointers, 13, nullptr, workspace, backward_bytes) != ATTNKIT_OK)
        throw Error(Status::internal, attnkit_last_error());
    });
    attnkit_plan_destroy(c_backward_plan);
    attnkit_plan_destroy(c_plan);
    for (void* p : {grad_q, grad_k, grad_v, workspace}) cudaFree(p);
#endif
  }

  if (section_on("gemm")) {
    size_t start = 0;
    while (start < g_gemm_shapes.size()) {
      size_t end = g_gemm_shapes.find(',', start);
      if (end == std::string::npos) end = g_gemm_shapes.size();
      long long m = 0, n = 0, k = 0;
      if (std::sscanf(g_gemm_shapes.substr(start, end - start).c_str(), "%lldx%lldx%lld", &m, &n, &k) == 3) {
        gemm_section(m, n, k);
      } else {
        std::printf("--gemm-shapes: %s is not MxNxK\n", g_gemm_shapes.substr(start, end - start).c_str());
      }
      start = end + 1;
    }
  }

  if (section_on("runtime")) {
    std::printf("\n== CUDA runtime calls ==\n");
    int value = 0;
    stage("cudaFuncSetAttribute(empty_kernel, MaxDynamicSharedMemorySize)", [&] {
      check(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024),
            "cudaFuncSetAttribute");
    });
    stage("cudaStreamIsCapturing(legacy stream)", [&] {
      cudaStreamCaptureStatus status;
      check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    });
    stage("cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)", [&] {
      check(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "cudaDeviceGetAttribute");
    });
    stage("cudaGetDevice", [&] { check(cudaGetDevice(&value), "cudaGetDevice"); });
    stage("cudaGetLastError", [&] { (void)cudaGetLastError(); });
    stage("empty kernel launch <<<1, 32, 0, legacy stream>>>", [&] { empty_kernel<<<1, 32, 0, stream>>>(); });
  }

  std::printf("\n==================== host_overhead_probe summary (us per call) ====================\n");
  std::printf("%-72s %10s %10s %12s\n", "stage", "us", "min", "host chunks");
  for (const Row& row : g_rows) {
    if (row.error.empty())
      std::printf("%-72s %10.3f %10.3f %12.3f\n", row.name.c_str(), row.us, row.us_min, row.us_chunks);
    else
      std::printf("%-72s FAILED: %s\n", row.name.c_str(), row.error.c_str());
  }
  for (void* p : {q, k, v, out, lse}) cudaFree(p);
  return 0;
}
