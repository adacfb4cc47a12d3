// The scattered-sparse element-mask path (src/cuda/sparse/), called directly (run_scattered_forward /
// run_scattered_backward), checked against the CPU oracle's attention with the same element mask.
// Each case: fresh random q, k, v (and grad_out), a mask of the case's pattern (uniformly scattered at a
// density, a band, a block, rows with no key), outputs poisoned with NaN before the GPU run, which must
// write every element of the views and nothing outside them; relative L2 errors within DESIGN §5
// (fp16 <= 5e-3, bf16 <= 1.5e-2); never NaN; rows with no key give out 0, lse -inf and zero gradients.
// Odd extents (not multiples of the 16-row warps or the 128/256-column tiles), Sq != Sk, GQA, D != Dv,
// per-batch / per-head / broadcast masks (extent 1 or a stride-0 view), padded strides, multi-dimensional
// token extents, caller workspace full of garbage, CUDA-graph capture. Without a GPU every GPU test skips
// with the reason; the capability messages are checked on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/float_convert.hpp"
#include "cuda_test_support.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/attention_shape.hpp"
#include "cuda/sparse/scattered_attention.hpp"
#include "cuda/sparse/scattered_launch.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaScatteredAttention, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using test::concat;
using test::cuda_device_present;
using test::DeviceBuffer;
using test::expect_cuda;
using test::product;
using test::TestTensor;
using test::widen_to_f32;

#define SKIP_WITHOUT_GPU() \
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: the scattered sparse kernels need a GPU"

enum class Pattern { scattered, band, block };
enum class Layout { contiguous, padded, noncollapsible_tokens };

struct Case {
  DType dtype = DType::bf16;
  int64_t batch = 2;
  std::vector<int64_t> tokens_q{77};
  std::vector<int64_t> tokens_kv{193};
  int64_t heads_q = 4;
  int64_t heads_kv = 2;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  Layout layout = Layout::contiguous;
  Pattern pattern = Pattern::scattered;
  double density = 0.05;
  int64_t mask_batch = 1;
  int64_t mask_heads = 1;
  int64_t mask_heads_view = 0;   // > 0: a one-head mask given as a stride-0 view over this many heads
  int64_t empty_rows_every = 0;  // every n-th query row attends no key
  bool diagonal = true;          // also attend key i * Sk / Sq from query i (as the issue's masks do)
  bool use_workspace = false;
};

double tolerance(DType dtype) { return dtype == DType::f16 ? 5e-3 : 1.5e-2; }

std::vector<int64_t> padding_for(Layout layout, std::size_t rank, std::size_t token_dims, bool has_feature_dim) {
  std::vector<int64_t> pad(rank, 0);
  if (layout == Layout::padded && has_feature_dim) pad[rank - 1] = 8;
  if (layout == Layout::padded) pad[0] = 1;
  if (layout == Layout::noncollapsible_tokens && token_dims >= 2) pad[token_dims] = 1;
  return pad;
}

void convert_into(const TensorView& from, const TensorView& to) {
  std::vector<int64_t> from_offsets;
  test::for_each_offset(from, [&](int64_t off) { from_offsets.push_back(off); });
  std::size_t i = 0;
  test::for_each_offset(to, [&](int64_t off) {
    detail::store_from_double(to.data, to.dtype, off, detail::load_as_double(from.data, from.dtype, from_offsets[i++]));
  });
}

TestTensor make_mask(const Case& c, std::mt19937_64& rng) {
  const int64_t seq_q = product(c.tokens_q);
  const int64_t seq_k = product(c.tokens_kv);
  TestTensor mask = TestTensor::make(DType::boolean, {c.mask_batch, c.mask_heads, seq_q, seq_k}, {0, 0, 0, 0});
  auto* m = static_cast<bool*>(mask.host.data);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::uniform_int_distribution<int64_t> shift(0, std::max<int64_t>(seq_k / 4, 1));
  for (int64_t s = 0; s < c.mask_batch * c.mask_heads; ++s) {
    const int64_t offset = shift(rng);  // slices differ, so a wrong slice shows
    for (int64_t i = 0; i < seq_q; ++i) {
      for (int64_t j = 0; j < seq_k; ++j) {
        bool on = false;
        const int64_t centre = i * seq_k / std::max<int64_t>(seq_q, 1);
        switch (c.pattern) {
          case Pattern::scattered: on = uniform(rng) < c.density; break;
          case Pattern::band: on = std::abs(j - centre - offset / 8) <= 9; break;
          case Pattern::block:
            on = i >= seq_q / 3 && i < 2 * seq_q / 3 + 1 && j >= offset && j < offset + seq_k / 3;
            break;
        }
        if (c.diagonal && j == centre) on = true;
        if (c.empty_rows_every > 0 && i % c.empty_rows_every == 0) on = false;
        m[(s * seq_q + i) * seq_k + j] = on;
      }
    }
  }
  return mask;
}

struct Tensors {
  TestTensor q, k, v, out, lse, grad_out, dq, dk, dv, mask;
};

Tensors make_tensors(const Case& c, std::mt19937_64& rng) {
  const std::size_t tq = c.tokens_q.size();
  const std::size_t tk = c.tokens_kv.size();
  auto q_side = [&](int64_t tail) {
    return TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, tail}),
                            padding_for(c.layout, tq + 3, tq, true));
  };
  auto kv_side = [&](int64_t tail) {
    return TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {c.heads_kv, tail}),
                            padding_for(c.layout, tk + 3, tk, true));
  };
  Tensors t{
      q_side(c.head_dim),
      kv_side(c.head_dim),
      kv_side(c.head_dim_v),
      q_side(c.head_dim_v),
      TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q}), padding_for(c.layout, tq + 2, tq, false)),
      q_side(c.head_dim_v),
      q_side(c.head_dim),
      kv_side(c.head_dim),
      kv_side(c.head_dim_v),
      make_mask(c, rng)};
  test::fill_random(t.q.buffer.view, rng, -2.0, 2.0);
  test::fill_random(t.k.buffer.view, rng, -2.0, 2.0);
  test::fill_random(t.v.buffer.view, rng, -1.0, 1.0);
  test::fill_random(t.grad_out.buffer.view, rng, -1.0, 1.0);
  return t;
}

TensorView mask_view(const Case& c, const TestTensor& mask, bool device) {
  return test::expanded_over_heads(device ? mask.device : mask.host, c.mask_heads_view);
}

// The CPU oracle's forward on fp32 copies; out (fp32) and lse (into t.lse.host).
test::HostTensor oracle_forward(const Case& c, Tensors& t) {
  AttentionForward f;
  const test::HostTensor q32 = widen_to_f32(t.q, f.q);
  const test::HostTensor k32 = widen_to_f32(t.k, f.k);
  const test::HostTensor v32 = widen_to_f32(t.v, f.v);
  test::HostTensor out32 =
      test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim_v}));
  f.out = out32.view;
  f.lse = t.lse.host;
  f.mask = element_sparse_mask(mask_view(c, t.mask, false));
  attention_forward(f, RunOptions{Backend::cpu, nullptr, 0});
  return out32;
}

void poison_and_upload(TestTensor& t) {
  test::poison_nan(t.buffer.view);
  t.upload();
}

// Workspace for a run: garbage-filled caller memory, or none (the call allocates stream-ordered).
DeviceBuffer workspace_for(const Case& c, int64_t bytes) {
  if (!c.use_workspace) return DeviceBuffer();
  DeviceBuffer buffer(static_cast<std::size_t>(bytes));
  expect_cuda(cudaMemset(buffer.data(), 0xff, static_cast<std::size_t>(std::max<int64_t>(bytes, 16))), "cudaMemset");
  return buffer;
}

// The forward on the device tensors of `t` (no lse).
AttentionForward device_forward(const Tensors& t, const TensorView& mask) {
  AttentionForward gpu;
  gpu.q = t.q.device;
  gpu.k = t.k.device;
  gpu.v = t.v.device;
  gpu.out = t.out.device;
  gpu.mask = element_sparse_mask(mask);
  return gpu;
}

void check_forward(const Case& c) {
  std::mt19937_64 rng(1);
  Tensors t = make_tensors(c, rng);
  const test::HostTensor out32 = oracle_forward(c, t);
  test::HostTensor lse_ref = test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q}));
  convert_into(t.lse.host, lse_ref.view);
  for (TestTensor* x : {&t.q, &t.k, &t.v, &t.mask}) x->upload();
  poison_and_upload(t.out);
  poison_and_upload(t.lse);

  AttentionForward gpu = device_forward(t, mask_view(c, t.mask, true));
  gpu.lse = t.lse.device;
  const detail::AttentionShape shape = detail::describe_attention(gpu.q, gpu.k, gpu.v, gpu.scale);
  ASSERT_EQ(cuda::sparse::scattered_forward_unsupported(gpu, shape), "");
  DeviceBuffer workspace = workspace_for(c, cuda::sparse::scattered_forward_workspace_bytes(gpu, shape));
  cuda::sparse::run_scattered_forward(gpu, shape, workspace.data(), nullptr);
  expect_cuda(cudaDeviceSynchronize(), "scattered forward");
  t.out.download();
  t.lse.download();
  EXPECT_TRUE(t.out.padding_untouched()) << "out: elements outside the view were written";
  EXPECT_TRUE(t.lse.padding_untouched()) << "lse: elements outside the view were written";
  EXPECT_FALSE(test::any_nan(t.out.host)) << "out: NaN (an element left unwritten, or a fully masked row)";
  EXPECT_LE(test::relative_l2(t.out.host, out32.view), tolerance(c.dtype)) << "out vs the CPU oracle";
  EXPECT_LE(test::relative_l2(t.lse.host, lse_ref.view), 1e-4) << "lse vs the CPU oracle";
}

void check_backward(const Case& c) {
  std::mt19937_64 rng(2);
  Tensors t = make_tensors(c, rng);
  const test::HostTensor out32 = oracle_forward(c, t);
  convert_into(out32.view, t.out.host);  // both backends see the same rounded out

  AttentionBackward cpu;
  const test::HostTensor q32 = widen_to_f32(t.q, cpu.q);
  const test::HostTensor k32 = widen_to_f32(t.k, cpu.k);
  const test::HostTensor v32 = widen_to_f32(t.v, cpu.v);
  const test::HostTensor o32 = widen_to_f32(t.out, cpu.out);
  const test::HostTensor g32 = widen_to_f32(t.grad_out, cpu.grad_out);
  cpu.lse = t.lse.host;
  test::HostTensor dq32 =
      test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim}));
  test::HostTensor dk32 =
      test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim}));
  test::HostTensor dv32 =
      test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim_v}));
  cpu.grad_q = dq32.view;
  cpu.grad_k = dk32.view;
  cpu.grad_v = dv32.view;
  cpu.mask = element_sparse_mask(mask_view(c, t.mask, false));
  attention_backward(cpu, RunOptions{Backend::cpu, nullptr, 0});

  for (TestTensor* x : {&t.q, &t.k, &t.v, &t.out, &t.lse, &t.grad_out, &t.mask}) x->upload();
  for (TestTensor* x : {&t.dq, &t.dk, &t.dv}) poison_and_upload(*x);
  AttentionBackward gpu;
  gpu.q = t.q.device;
  gpu.k = t.k.device;
  gpu.v = t.v.device;
  gpu.out = t.out.device;
  gpu.lse = t.lse.device;
  gpu.grad_out = t.grad_out.device;
  gpu.grad_q = t.dq.device;
  gpu.grad_k = t.dk.device;
  gpu.grad_v = t.dv.device;
  gpu.mask = element_sparse_mask(mask_view(c, t.mask, true));
  const detail::AttentionShape shape = detail::describe_attention(gpu.q, gpu.k, gpu.v, gpu.scale);
  ASSERT_EQ(cuda::sparse::scattered_backward_unsupported(gpu, shape), "");
  DeviceBuffer workspace = workspace_for(c, cuda::sparse::scattered_backward_workspace_bytes(gpu, shape));
  cuda::sparse::run_scattered_backward(gpu, shape, workspace.data(), nullptr);
  expect_cuda(cudaDeviceSynchronize(), "scattered backward");
  const char* names[] = {"grad_q", "grad_k", "grad_v"};
  TestTensor* results[] = {&t.dq, &t.dk, &t.dv};
  const TensorView references[] = {dq32.view, dk32.view, dv32.view};
  for (int i = 0; i < 3; ++i) {
    results[i]->download();
    EXPECT_TRUE(results[i]->padding_untouched()) << names[i] << ": elements outside the view were written";
    EXPECT_FALSE(test::any_nan(results[i]->host)) << names[i] << ": NaN";
    EXPECT_LE(test::relative_l2(results[i]->host, references[i]), tolerance(c.dtype)) << names[i] << " vs the oracle";
  }
}

// --- cases of both directions (check: check_forward or check_backward) ----------------------------

void check_densities(void (*check)(const Case&), std::initializer_list<double> densities) {
  for (double density : densities) {
    SCOPED_TRACE("density " + std::to_string(density));
    Case c;
    c.tokens_q = {301};
    c.tokens_kv = {517};
    c.density = density;
    check(c);
  }
}

void check_every_dtype_and_width(void (*check)(const Case&)) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int64_t d : {32, 64, 128}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " D " + std::to_string(d));
      Case c;
      c.dtype = dtype;
      c.head_dim = c.head_dim_v = d;
      check(c);
    }
  }
}

// --- capability messages (host only) ------------------------------------------------------------

AttentionForward forward_of(DType dtype, int64_t head_dim) {
  AttentionForward f;
  f.q = make_view(nullptr, dtype, {1, 16, 2, head_dim});
  f.k = make_view(nullptr, dtype, {1, 24, 2, head_dim});
  f.v = make_view(nullptr, dtype, {1, 24, 2, head_dim});
  f.out = make_view(nullptr, dtype, {1, 16, 2, head_dim});
  f.mask = element_sparse_mask(make_view(nullptr, DType::boolean, {1, 1, 16, 24}));
  return f;
}

TEST(CudaScatteredCapability, ARefusedDtypeNamesTheAllowedOnes) {
  const AttentionForward f = forward_of(DType::f32, 64);
  const std::string why =
      cuda::sparse::scattered_forward_unsupported(f, detail::describe_attention(f.q, f.k, f.v, f.scale));
  EXPECT_NE(why.find("q.dtype"), std::string::npos) << why;
  EXPECT_NE(why.find("float16, bfloat16"), std::string::npos) << why;
}

TEST(CudaScatteredCapability, ARefusedHeadDimNamesTheAllowedOnes) {
  const AttentionForward f = forward_of(DType::bf16, 256);
  const std::string why =
      cuda::sparse::scattered_forward_unsupported(f, detail::describe_attention(f.q, f.k, f.v, f.scale));
  EXPECT_NE(why.find("D = 256"), std::string::npos) << why;
  EXPECT_NE(why.find("up to 128"), std::string::npos) << why;
}

TEST(CudaScatteredCapability, TheBackwardNeedsTheForwardsLse) {
  const AttentionForward f = forward_of(DType::f16, 64);
  AttentionBackward b;
  b.q = b.grad_q = f.q;
  b.k = b.grad_k = f.k;
  b.v = b.grad_v = f.v;
  b.out = b.grad_out = f.out;
  b.mask = f.mask;
  const std::string why =
      cuda::sparse::scattered_backward_unsupported(b, detail::describe_attention(b.q, b.k, b.v, b.scale));
  EXPECT_NE(why.find("lse"), std::string::npos) << why;
}

// The dK/dV kernel's warps by the device's shared memory per block (SM90 227 KiB, SM80 163 KiB, SM86 / SM89 99
// KiB), and the least each direction needs: every width runs on SM80, and the 64-wide forward's two stages of K and
// V tiles do not fit 99 KiB.
TEST(CudaScatteredCapability, TheDkDvKernelRunsSixteenWarpsWhereItsSharedMemoryFits) {
  using cuda::sparse::scattered_dkdv_warps;
  using cuda::sparse::scattered_least_shared_bytes;
  constexpr int kSm90 = 232448;
  constexpr int kSm80 = 166912;
  constexpr int kSm86 = 101376;
  EXPECT_EQ(scattered_dkdv_warps(64, kSm90), 16);
  EXPECT_EQ(scattered_dkdv_warps(64, kSm80), 8);
  EXPECT_EQ(scattered_dkdv_warps(32, kSm80), 16);
  EXPECT_EQ(scattered_dkdv_warps(32, kSm86), 8);
  EXPECT_EQ(scattered_dkdv_warps(128, kSm90), 8);
  for (int width : {32, 64, 128}) {
    EXPECT_LE(scattered_least_shared_bytes(width, false), kSm80) << width;
    EXPECT_LE(scattered_least_shared_bytes(width, true), kSm80) << width;
  }
  EXPECT_LE(scattered_least_shared_bytes(32, true), kSm86);
  EXPECT_GT(scattered_least_shared_bytes(64, false), kSm86);
}

// The backward kernels' producer-warp forms (240 rows a CTA) run where their grid fills the waves about as well as the
// cp.async forms' (256 rows): B1 H16 on 132 multiprocessors at S 8192 (560 against 512 CTAs: 0.85 and 0.97 of the
// waves) and S 16384, not at S 4096 (288 against 256: 0.73 and 0.97); without a multiprocessor count the cp.async form.
TEST(CudaScatteredCapability, TheTmaFormsRunWhereTheirGridFillsTheWaves) {
  using cuda::sparse::scattered_tma_fills_waves;
  EXPECT_TRUE(scattered_tma_fills_waves(560, 512, 132));
  EXPECT_TRUE(scattered_tma_fills_waves(1104, 1024, 132));
  EXPECT_FALSE(scattered_tma_fills_waves(288, 256, 132));
  EXPECT_TRUE(scattered_tma_fills_waves(16, 16, 132)) << "one CTA a (batch, head) on both forms";
  EXPECT_FALSE(scattered_tma_fills_waves(560, 512, 0));
}

// Takes the current device to have at most `bytes` of shared memory per block while in scope.
struct SharedMemoryLimit {
  explicit SharedMemoryLimit(int bytes) { cuda::sparse::set_scattered_shared_memory_limit(bytes); }
  ~SharedMemoryLimit() { cuda::sparse::set_scattered_shared_memory_limit(0); }
  SharedMemoryLimit(const SharedMemoryLimit&) = delete;
  SharedMemoryLimit& operator=(const SharedMemoryLimit&) = delete;
};

// --- forward -------------------------------------------------------------------------------------

TEST(CudaScatteredForward, ScatteredDensitiesMatchTheOracle) {
  SKIP_WITHOUT_GPU();
  check_densities(check_forward, {0.001, 0.01, 0.03, 0.1, 0.5});
}

TEST(CudaScatteredForward, HalfPrecisionAndEveryWidth) {
  SKIP_WITHOUT_GPU();
  check_every_dtype_and_width(check_forward);
}

TEST(CudaScatteredForward, HeadDimVDiffersFromHeadDim) {
  SKIP_WITHOUT_GPU();
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{64, 128}, {128, 64}, {40, 24}, {96, 64}}) {
    SCOPED_TRACE("D " + std::to_string(d) + " Dv " + std::to_string(dv));
    Case c;
    c.head_dim = d;
    c.head_dim_v = dv;
    check_forward(c);
  }
}

TEST(CudaScatteredForward, StructuredMasks) {
  SKIP_WITHOUT_GPU();
  for (Pattern pattern : {Pattern::band, Pattern::block}) {
    Case c;
    c.tokens_q = {290};
    c.tokens_kv = {700};
    c.pattern = pattern;
    c.diagonal = false;  // the block leaves rows without keys
    check_forward(c);
  }
}

TEST(CudaScatteredForward, RowsWithoutKeysGiveZeroAndMinusInfinity) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.empty_rows_every = 3;
  check_forward(c);
  c.density = 0.0;
  c.diagonal = false;  // no key at all
  check_forward(c);
}

TEST(CudaScatteredForward, PerBatchPerHeadAndBroadcastMasks) {
  SKIP_WITHOUT_GPU();
  for (auto [mb, mh, view] : {std::tuple<int64_t, int64_t, int64_t>{2, 4, 0}, {1, 4, 0}, {2, 1, 0}, {1, 1, 4}}) {
    SCOPED_TRACE("mask [" + std::to_string(mb) + ", " + std::to_string(mh) + "] view heads " + std::to_string(view));
    Case c;
    c.mask_batch = mb;
    c.mask_heads = mh;
    c.mask_heads_view = view;
    check_forward(c);
  }
}

// The union lists are indexed by (mask slice, 16-row group, key tile): per-batch and per-head masks over
// several key tiles (256 keys a tile up to D 64, 128 at D 128) and a partial last group.
TEST(CudaScatteredForward, PerHeadMasksOverSeveralKeyTiles) {
  SKIP_WITHOUT_GPU();
  for (int64_t head_dim : {64, 128}) {
    SCOPED_TRACE("D " + std::to_string(head_dim));
    Case c;
    c.head_dim = head_dim;
    c.head_dim_v = head_dim;
    c.tokens_q = {45};
    c.tokens_kv = {600};
    c.mask_batch = 2;
    c.mask_heads = 4;
    c.empty_rows_every = 7;
    check_forward(c);
  }
}

TEST(CudaScatteredForward, GqaMqaAndLongerQueries) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.heads_q = 8;
  c.heads_kv = 1;
  c.tokens_q = {530};
  c.tokens_kv = {129};
  c.density = 0.08;
  check_forward(c);
}

TEST(CudaScatteredForward, StridedViewsAndTokenGrids) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.layout = Layout::padded;
  check_forward(c);
  c.layout = Layout::noncollapsible_tokens;
  c.tokens_q = {7, 11};
  c.tokens_kv = {3, 5, 13};
  check_forward(c);
}

TEST(CudaScatteredForward, CallerWorkspaceContentsDoNotMatter) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.use_workspace = true;
  c.mask_heads = 4;
  check_forward(c);
}

// --- backward ------------------------------------------------------------------------------------

TEST(CudaScatteredBackward, ScatteredDensitiesMatchTheOracle) {
  SKIP_WITHOUT_GPU();
  check_densities(check_backward, {0.001, 0.01, 0.05, 0.3});
}

TEST(CudaScatteredBackward, HalfPrecisionAndEveryWidth) {
  SKIP_WITHOUT_GPU();
  check_every_dtype_and_width(check_backward);
}

TEST(CudaScatteredBackward, HeadDimVDiffersAndGqa) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.head_dim = 64;
  c.head_dim_v = 128;
  c.heads_q = 6;
  c.heads_kv = 2;
  check_backward(c);
  c.head_dim = 128;
  c.head_dim_v = 32;
  c.heads_kv = 1;
  check_backward(c);
}

TEST(CudaScatteredBackward, StructuredAndPerHeadMasksWithEmptyRows) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.pattern = Pattern::band;
  c.mask_batch = 2;
  c.mask_heads = 4;
  c.empty_rows_every = 5;
  check_backward(c);
  c.pattern = Pattern::block;
  c.diagonal = false;
  c.mask_batch = 1;
  c.mask_heads = 1;
  c.mask_heads_view = 4;
  check_backward(c);
}

// The dK/dV kernel walks the key-major lists of every query head of its GQA group, tile by tile: per-head
// masks over several query tiles, with caller workspace full of garbage.
TEST(CudaScatteredBackward, PerHeadMasksOverSeveralQueryTilesAndGqa) {
  SKIP_WITHOUT_GPU();
  for (int64_t head_dim : {64, 128}) {
    SCOPED_TRACE("D " + std::to_string(head_dim));
    Case c;
    c.head_dim = head_dim;
    c.head_dim_v = head_dim;
    c.tokens_q = {530};
    c.tokens_kv = {150};
    c.heads_q = 6;
    c.heads_kv = 2;
    c.mask_heads = 6;
    c.empty_rows_every = 9;
    c.use_workspace = true;
    check_backward(c);
  }
}

TEST(CudaScatteredBackward, StridedViewsTokenGridsAndWorkspace) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.layout = Layout::padded;
  c.use_workspace = true;
  check_backward(c);
  c.layout = Layout::noncollapsible_tokens;
  c.tokens_q = {9, 13};
  c.tokens_kv = {4, 50};
  check_backward(c);
}

TEST(CudaScatteredBackward, MoreQueriesThanKeys) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.tokens_q = {611};
  c.tokens_kv = {70};
  c.density = 0.1;
  c.dtype = DType::f16;
  check_backward(c);
}

// A device of SM80's 163 KiB per block runs the 8-warp dK/dV kernel at width 64 (16 warps need 164 KiB there), one of
// SM86's 99 KiB at width 32 too, and refuses the 64-wide forward with the figures: any GPU with more shared memory
// runs those launches under a lower limit.
TEST(CudaScatteredBackward, TheEightWarpDkDvKernelOfSmallerDevicesMatchesTheOracle) {
  SKIP_WITHOUT_GPU();
  {
    const SharedMemoryLimit sm80(166912);
    for (DType dtype : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(dtype_name(dtype));
      Case c;
      c.dtype = dtype;
      c.head_dim = c.head_dim_v = 64;
      check_backward(c);
    }
  }
  const SharedMemoryLimit sm86(101376);
  Case c;
  c.head_dim = c.head_dim_v = 32;
  check_backward(c);
  const AttentionForward f = forward_of(DType::bf16, 64);
  const std::string why =
      cuda::sparse::scattered_forward_unsupported(f, detail::describe_attention(f.q, f.k, f.v, f.scale));
  EXPECT_NE(why.find("101376 bytes of shared memory per block"), std::string::npos) << why;
  EXPECT_NE(why.find("need 163840"), std::string::npos) << why;
}

// --- CUDA graphs ---------------------------------------------------------------------------------

TEST(CudaScatteredForward, RunsInsideACudaGraphCapture) {
  SKIP_WITHOUT_GPU();
  Case c;
  std::mt19937_64 rng(7);
  Tensors t = make_tensors(c, rng);
  const test::HostTensor out32 = oracle_forward(c, t);
  for (TestTensor* x : {&t.q, &t.k, &t.v, &t.mask}) x->upload();
  poison_and_upload(t.out);
  const AttentionForward gpu = device_forward(t, t.mask.device);
  const detail::AttentionShape shape = detail::describe_attention(gpu.q, gpu.k, gpu.v, gpu.scale);
  cudaStream_t stream = nullptr;
  expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t graph = nullptr;
  {
    test::StreamCapture capture(stream);
    ASSERT_TRUE(capture.began());
    cuda::sparse::run_scattered_forward(gpu, shape, nullptr, stream);  // stream-ordered workspace inside the graph
    graph = capture.end();
  }
  ASSERT_NE(graph, nullptr) << "the capture failed: a call that is not graph-capturable";
  cudaGraphExec_t exec = nullptr;
  expect_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  expect_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  expect_cuda(cudaStreamSynchronize(stream), "graph run");
  t.out.download();
  EXPECT_LE(test::relative_l2(t.out.host, out32.view), tolerance(c.dtype)) << "out of the replayed graph";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// --- timing (disabled by default; --gtest_also_run_disabled_tests) ---------------------------------

// Median time of `run` over `repeats` runs after 3 warm-ups, in milliseconds.
template <class Run>
double median_ms(const Run& run, int repeats = 20) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start);
    run();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The issue's problem: B 1, H 16, S 8192, D 64, bf16, a broadcast [1, 1, S, S] scattered mask plus the
// diagonal. Prints forward and backward milliseconds (workspace given, so no allocation is timed) and
// TF/s of useful FLOPs (4 pairs D forward, 2.5x that backward).
TEST(CudaScatteredAttention, DISABLED_TimingIssueProblem) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 8192, h = 16, d = 64;
  std::mt19937_64 rng(11);
  auto tensor = [&](std::vector<int64_t> extents, DType dtype) {
    TestTensor t = TestTensor::make(dtype, extents, std::vector<int64_t>(extents.size(), 0));
    if (dtype != DType::f32) test::fill_random(t.host, rng, -1.0, 1.0);
    t.upload();
    return t;
  };
  TestTensor q = tensor({1, s, h, d}, DType::bf16), k = tensor({1, s, h, d}, DType::bf16);
  TestTensor v = tensor({1, s, h, d}, DType::bf16), out = tensor({1, s, h, d}, DType::bf16);
  TestTensor grad_out = tensor({1, s, h, d}, DType::bf16), lse = tensor({1, s, h}, DType::f32);
  TestTensor dq = tensor({1, s, h, d}, DType::bf16), dk = tensor({1, s, h, d}, DType::bf16);
  TestTensor dv = tensor({1, s, h, d}, DType::bf16);
  for (double density : {0.001, 0.01, 0.03, 0.1, 0.3}) {
    TestTensor mask = TestTensor::make(DType::boolean, {1, 1, s, s}, {0, 0, 0, 0});
    auto* m = static_cast<bool*>(mask.host.data);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    int64_t pairs = 0;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        m[i * s + j] = i == j || uniform(rng) < density;
        pairs += m[i * s + j] ? 1 : 0;
      }
    }
    mask.upload();
    AttentionForward f;
    f.q = q.device;
    f.k = k.device;
    f.v = v.device;
    f.out = out.device;
    f.lse = lse.device;
    f.mask = element_sparse_mask(test::expanded_over_heads(mask.device, h));
    const detail::AttentionShape shape = detail::describe_attention(f.q, f.k, f.v, f.scale);
    DeviceBuffer forward_workspace(static_cast<std::size_t>(cuda::sparse::scattered_forward_workspace_bytes(f, shape)));
    const double forward_ms =
        median_ms([&] { cuda::sparse::run_scattered_forward(f, shape, forward_workspace.data(), nullptr); });
    AttentionBackward b;
    b.q = q.device;
    b.k = k.device;
    b.v = v.device;
    b.out = out.device;
    b.lse = lse.device;
    b.grad_out = grad_out.device;
    b.grad_q = dq.device;
    b.grad_k = dk.device;
    b.grad_v = dv.device;
    b.mask = f.mask;
    DeviceBuffer backward_workspace(
        static_cast<std::size_t>(cuda::sparse::scattered_backward_workspace_bytes(b, shape)));
    const double backward_ms =
        median_ms([&] { cuda::sparse::run_scattered_backward(b, shape, backward_workspace.data(), nullptr); });
    const double flops = 4.0 * static_cast<double>(pairs) * static_cast<double>(h * d);
    std::printf(
        "scattered B1 H16 S8192 D64 bf16 density %.3f: forward %.3f ms (%.1f TF/s), backward %.3f ms "
        "(%.1f TF/s)\n",
        density, forward_ms, flops / forward_ms * 1e-9, backward_ms, 2.5 * flops / backward_ms * 1e-9);
  }
}

#endif  // ATTNKIT_WITH_CUDA

}  // namespace
}  // namespace attnkit
