// The portable fused-attention backward on the GPU (src/cuda/fmha/fmha_backward*), checked against the
// CPU oracle's gradients through the public API. Each case: fresh random q, k, v and grad_out; the
// forward's out and lse come from the CPU oracle (out rounded to the case's dtype, so both backends see
// the same values); grad_q, grad_k and grad_v are poisoned with NaN before the GPU run and must be fully
// written (and nothing outside the views); their relative L2 errors against the oracle's fp32
// gradients stay within DESIGN §5 (fp16 <= 5e-3, bf16 <= 1.5e-2). Every mask kind, GQA/MQA, odd extents,
// head_dim_v != head_dim, strided views, rows with no key (zero gradients), caller workspace and streams.
// Every case runs in both modes on the same inputs: fast (the default: dQ accumulated with fp32 atomics
// in the dK/dV kernel) and deterministic (the portable tier: the separate dQ kernel; the Hopper tier: the
// same additions in a fixed order); each must match the oracle, grad_k and grad_v must be bit-identical
// between the modes (one kernel computes them in both, over the same visits) and grad_q must agree within
// the dtype's tolerance. (On the Hopper tier the deterministic mode's dK/dV CTAs keep their Q tiles aligned
// to the Q box, since its fixed dQ order is built on them, while fast mode starts them at the first query
// that sees the KV tile: where that moves some CTA's tiles, or the modes choose other box shapes, grad_k and
// grad_v are summed in another order and agree within the dtype's tolerance instead.) Deterministic mode alone is
// bit-identical across reruns: every case runs it twice. Without CUDA (or a GPU) every GPU test skips; the
// workspace-size tests of FmhaBackwardWorkspace run on the host.
//
// KV-parallel splitting (AttentionBackward::kv_splits) has its own cases (KvSplits*, every mask kind, splits
// with no visits, caller workspace full of NaN bytes, reruns); the other cases run unsplit (kv_splits 1).
//
// CudaFmhaBackward.DISABLED_Timing* (disabled by default; --gtest_also_run_disabled_tests) prints the
// backward's TF/s in both modes on representative shapes, counting 2.5 x the forward's useful FLOPs
// (10 * pairs * D per head) for either mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda_test_support.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/attention_shape.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/common/tile_range_inverse.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaFmhaBackward, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using test::cuda_device_present;
using test::DeviceBuffer;
using test::expect_cuda;
using test::ForcedHeadsPerCta;
using test::nd;
using test::neighborhood;
using test::TestTensor;
using test::widen_to_f32;

// --- one case: problem description, run on both backends, compare ---------------------------

enum class Layout { contiguous, padded_heads, noncollapsible_tokens };

struct Case {
  DType dtype = DType::f16;
  int64_t batch = 2;
  std::vector<int64_t> tokens_q{77};
  std::vector<int64_t> tokens_kv{131};
  int64_t heads_q = 4;
  int64_t heads_kv = 2;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  std::optional<double> scale;
  Layout layout = Layout::contiguous;
  AttentionMask mask{};
  int64_t mask_batch = 1;
  int64_t mask_heads = 1;
  // > 0: the mask is stored with one head and given as a view of this many heads with head stride 0 (as torch's
  // expand makes it): it must run as the broadcast mask it is.
  int64_t mask_heads_view = 0;
  double mask_density = 0.5;
  int64_t empty_rows_every = 0;  // element masks: every n-th query row attends nothing
  bool deterministic = false;    // false: fast mode (the default)
  bool use_stream = false;
  bool use_workspace = false;
  // AttentionBackward::kv_splits: 1 (never split) keeps the unsplit kernels under test in the cases that
  // do not ask for splits; 0 is the automatic choice.
  int32_t kv_splits = 1;
  // Neighborhood masks: a relative positional bias [heads_q, 2K-1, ...] of this dtype and its gradient
  // (grad_rpb, same dtype and layout), stored with padding after every dimension when rpb_padded.
  std::optional<DType> rpb;
  bool rpb_padded = false;
};

double tolerance(DType dtype) { return dtype == DType::f16 ? 5e-3 : 1.5e-2; }

int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

std::vector<int64_t> concat(int64_t b, const std::vector<int64_t>& tokens, std::vector<int64_t> tail) {
  std::vector<int64_t> e{b};
  e.insert(e.end(), tokens.begin(), tokens.end());
  e.insert(e.end(), tail.begin(), tail.end());
  return e;
}

std::vector<int64_t> padding_for(Layout layout, std::size_t rank, std::size_t token_dims, bool has_head_dim) {
  std::vector<int64_t> pad(rank, 0);
  if (layout == Layout::padded_heads && has_head_dim) pad[rank - 1] = 8;
  if (layout == Layout::noncollapsible_tokens && token_dims >= 2) pad[1 + token_dims - 1] = 1;
  return pad;
}

bool compiled_for(const Case& c) {
  return cuda::fmha::fmha_backward_compiled_width(c.dtype, c.head_dim, c.head_dim_v) != 0;
}

// Copies the values of an fp32 view into a view of another dtype with the same extents.
void convert_into(const TensorView& from, const TensorView& to) {
  std::vector<int64_t> from_offsets;
  test::for_each_offset(from, [&](int64_t off) { from_offsets.push_back(off); });
  std::size_t i = 0;
  test::for_each_offset(to, [&](int64_t off) {
    detail::store_from_double(to.data, to.dtype, off, detail::load_as_double(from.data, from.dtype, from_offsets[i++]));
  });
}

// Rows (b, token, h) of a [B, *tokens, H, X] view for which is_structural_zero({b, *coords, h, 0}) holds and
// that hold a nonzero element: how many such rows there are.
template <class Predicate>
int64_t count_nonzero_rows(const TensorView& view, const std::vector<int64_t>& tokens, int64_t heads,
                           const Predicate& is_structural_zero) {
  const int64_t width = view.extents[view.rank - 1];
  int64_t count = 0;
  for (int64_t b = 0; b < view.extents[0]; ++b) {
    for (int64_t t = 0; t < product(tokens); ++t) {
      std::vector<int64_t> index{b};
      std::vector<int64_t> coords(tokens.size());
      int64_t rest = t;
      for (std::size_t d = tokens.size(); d-- > 0;) {
        coords[d] = rest % tokens[d];
        rest /= tokens[d];
      }
      index.insert(index.end(), coords.begin(), coords.end());
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<int64_t> row = index;
        row.push_back(h);
        row.push_back(0);
        if (!is_structural_zero(row)) continue;
        for (int64_t e = 0; e < width; ++e) {
          row.back() = e;
          if (test::element_at(view, row) != 0.0) {
            ++count;
            break;
          }
        }
      }
    }
  }
  return count;
}

struct CaseResult {
  double dq_error = 0, dk_error = 0, dv_error = 0, rpb_error = 0;
  std::vector<std::byte> dq_bytes, dk_bytes, dv_bytes, rpb_bytes;  // the GPU results, for bit-identity checks
  std::vector<double> dq_values, dk_values, dv_values;             // elements in view order, for mode comparisons
};

// ||a - b|| / ||b|| over two equally long value lists.
double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Builds the case's tensors (seeded), runs the GPU backward (twice in deterministic mode: both runs'
// bits must agree) and the CPU oracle once.
CaseResult run_case(const Case& c, uint64_t seed) {
  CaseResult result;
  std::mt19937_64 rng(seed);
  const std::size_t tq = c.tokens_q.size();
  const std::size_t tk = c.tokens_kv.size();
  auto q_side = [&](int64_t tail) {
    return TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, tail}),
                            padding_for(c.layout, tq + 3, tq, true));
  };
  auto kv_side = [&](int64_t heads, int64_t tail) {
    return TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {heads, tail}),
                            padding_for(c.layout, tk + 3, tk, true));
  };
  TestTensor q = q_side(c.head_dim);
  TestTensor k = kv_side(c.heads_kv, c.head_dim);
  TestTensor v = kv_side(c.heads_kv, c.head_dim_v);
  TestTensor out = q_side(c.head_dim_v);
  TestTensor grad_out = q_side(c.head_dim_v);
  TestTensor lse =
      TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q}), padding_for(c.layout, tq + 2, tq, false));
  TestTensor dq = q_side(c.head_dim);
  TestTensor dk = kv_side(c.heads_kv, c.head_dim);
  TestTensor dv = kv_side(c.heads_kv, c.head_dim_v);
  test::fill_random(q.buffer.view, rng, -2.0, 2.0);
  test::fill_random(k.buffer.view, rng, -2.0, 2.0);
  test::fill_random(v.buffer.view, rng, -1.0, 1.0);
  test::fill_random(grad_out.buffer.view, rng, -1.0, 1.0);

  AttentionMask mask = c.mask;
  std::optional<TestTensor> mask_tensor;
  const int64_t seq_q = product(c.tokens_q);
  const int64_t seq_k = product(c.tokens_kv);
  if (mask.kind == MaskKind::block) {
    const int64_t rows = (seq_q + mask.block_q - 1) / mask.block_q;
    const int64_t cols = (seq_k + mask.block_k - 1) / mask.block_k;
    mask_tensor = TestTensor::make(DType::boolean, {c.mask_batch, c.mask_heads, rows, cols}, {0, 0, 0, 0});
    test::fill_random_bool(mask_tensor->host, rng, c.mask_density);
  } else if (mask.kind == MaskKind::element) {
    mask_tensor = TestTensor::make(DType::boolean, {c.mask_batch, c.mask_heads, seq_q, seq_k}, {0, 0, 0, 0});
    test::fill_random_bool(mask_tensor->host, rng, c.mask_density);
    if (c.empty_rows_every > 0) {
      auto* m = static_cast<bool*>(mask_tensor->host.data);
      for (int64_t bh = 0; bh < c.mask_batch * c.mask_heads; ++bh) {
        for (int64_t r = 0; r < seq_q; r += c.empty_rows_every) std::fill_n(m + (bh * seq_q + r) * seq_k, seq_k, false);
      }
    }
  }
  AttentionMask cpu_mask = mask;
  if (mask.kind == MaskKind::block)
    cpu_mask.block_mask = test::expanded_over_heads(mask_tensor->host, c.mask_heads_view);
  if (mask.kind == MaskKind::element)
    cpu_mask.element_mask = test::expanded_over_heads(mask_tensor->host, c.mask_heads_view);
  std::optional<TestTensor> rpb, grad_rpb, grad_rpb_ref;
  std::optional<test::HostTensor> rpb32;
  if (c.rpb) {
    std::vector<int64_t> extents{c.heads_q};
    for (int d = 0; d < mask.dims; ++d)
      extents.push_back(2 * mask.neighborhood[static_cast<size_t>(d)].kernel_size - 1);
    const std::vector<int64_t> padding(extents.size(), c.rpb_padded ? 1 : 0);
    rpb = TestTensor::make(*c.rpb, extents, padding);
    grad_rpb = TestTensor::make(*c.rpb, extents, padding);
    grad_rpb_ref = TestTensor::make(DType::f32, extents, padding);
    test::fill_random(rpb->buffer.view, rng, -3.0, 3.0);
    rpb32.emplace(widen_to_f32(*rpb, cpu_mask.rpb));
  }

  // Forward on the CPU oracle (fp32 copies of the inputs); out is rounded to the case's dtype.
  AttentionForward forward;
  const test::HostTensor q32 = widen_to_f32(q, forward.q);
  const test::HostTensor k32 = widen_to_f32(k, forward.k);
  const test::HostTensor v32 = widen_to_f32(v, forward.v);
  test::HostTensor out32 =
      test::HostTensor::contiguous(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim_v}));
  forward.out = out32.view;
  forward.lse = lse.host;
  forward.scale = c.scale;
  forward.mask = cpu_mask;
  attention_forward(forward, RunOptions{Backend::cpu, nullptr, 0});
  convert_into(out32.view, out.host);

  for (TestTensor* t : {&q, &k, &v, &out, &grad_out, &lse}) t->upload();
  if (mask_tensor) mask_tensor->upload();
  if (rpb) rpb->upload();

  // GPU backward.
  AttentionBackward gpu;
  gpu.q = q.device;
  gpu.k = k.device;
  gpu.v = v.device;
  gpu.out = out.device;
  gpu.lse = lse.device;
  gpu.grad_out = grad_out.device;
  gpu.grad_q = dq.device;
  gpu.grad_k = dk.device;
  gpu.grad_v = dv.device;
  gpu.scale = c.scale;
  gpu.mask = mask;
  gpu.deterministic = c.deterministic;
  gpu.kv_splits = c.kv_splits;
  if (mask.kind == MaskKind::block)
    gpu.mask.block_mask = test::expanded_over_heads(mask_tensor->device, c.mask_heads_view);
  if (mask.kind == MaskKind::element)
    gpu.mask.element_mask = test::expanded_over_heads(mask_tensor->device, c.mask_heads_view);
  if (rpb) {
    gpu.mask.rpb = rpb->device;
    gpu.grad_rpb = grad_rpb->device;
  }
  RunOptions options;
  options.backend = Backend::cuda;
  cudaStream_t stream = nullptr;
  if (c.use_stream) {
    expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    options.stream = stream;
  }
  DeviceBuffer workspace;
  if (c.use_workspace) {
    const int64_t bytes = attention_backward_workspace_size(gpu, options);
    EXPECT_GT(bytes, 0) << "the backward always needs its row statistics";
    workspace = DeviceBuffer(static_cast<std::size_t>(bytes));
    // Garbage (all-ones bytes: NaN floats): the backward must not depend on the workspace's contents,
    // e.g. fast mode must zero its dQ accumulator itself.
    expect_cuda(cudaMemset(workspace.data(), 0xff, static_cast<std::size_t>(bytes)), "cudaMemset (workspace)");
    options.workspace = workspace.data();
    options.workspace_bytes = bytes;
  }
  auto bytes_of = [](const TestTensor& t) {
    const auto* b = static_cast<const std::byte*>(t.buffer.view.data);
    return std::vector<std::byte>(b, b + t.bytes);
  };
  std::vector<TestTensor*> gradients{&dq, &dk, &dv};
  if (grad_rpb) gradients.push_back(&*grad_rpb);
  auto run_gpu = [&] {
    for (TestTensor* t : gradients) {
      test::poison_nan(t->buffer.view);
      t->upload();
    }
    attention_backward(gpu, options);
    expect_cuda(c.use_stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize(), "synchronize");
    for (TestTensor* t : gradients) t->download();
  };
  run_gpu();
  if (c.deterministic) {  // every case: a rerun on the same inputs gives the same bits
    const std::vector<std::byte> first_dq = bytes_of(dq), first_dk = bytes_of(dk), first_dv = bytes_of(dv);
    const std::vector<std::byte> first_rpb = grad_rpb ? bytes_of(*grad_rpb) : std::vector<std::byte>{};
    run_gpu();
    EXPECT_TRUE(bytes_of(dq) == first_dq) << "deterministic mode: grad_q differs between two runs";
    EXPECT_TRUE(bytes_of(dk) == first_dk) << "deterministic mode: grad_k differs between two runs";
    EXPECT_TRUE(bytes_of(dv) == first_dv) << "deterministic mode: grad_v differs between two runs";
    if (grad_rpb) {
      EXPECT_TRUE(bytes_of(*grad_rpb) == first_rpb) << "deterministic mode: grad_rpb differs";
    }
  }
  if (stream != nullptr) cudaStreamDestroy(stream);

  // CPU oracle backward on fp32 copies of the same values.
  AttentionBackward cpu;
  cpu.q = forward.q;
  cpu.k = forward.k;
  cpu.v = forward.v;
  const test::HostTensor out_wide = widen_to_f32(out, cpu.out);
  const test::HostTensor grad_out_wide = widen_to_f32(grad_out, cpu.grad_out);
  cpu.lse = lse.host;
  TestTensor dq_ref = TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim}),
                                       padding_for(c.layout, tq + 3, tq, true));
  TestTensor dk_ref = TestTensor::make(DType::f32, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim}),
                                       padding_for(c.layout, tk + 3, tk, true));
  TestTensor dv_ref = TestTensor::make(DType::f32, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim_v}),
                                       padding_for(c.layout, tk + 3, tk, true));
  cpu.grad_q = dq_ref.host;
  cpu.grad_k = dk_ref.host;
  cpu.grad_v = dv_ref.host;
  cpu.scale = c.scale;
  cpu.mask = cpu_mask;
  if (grad_rpb_ref) cpu.grad_rpb = grad_rpb_ref->host;
  attention_backward(cpu, RunOptions{Backend::cpu, nullptr, 0});
  if (grad_rpb) {
    EXPECT_FALSE(test::any_nan(grad_rpb->host)) << "grad_rpb not fully written (NaN poison left) or NaN produced";
    EXPECT_TRUE(grad_rpb->padding_untouched()) << "grad_rpb: elements outside the view were written";
    result.rpb_error = test::relative_l2(grad_rpb->host, grad_rpb_ref->host);
    EXPECT_LE(result.rpb_error, tolerance(c.dtype)) << "grad_rpb relative L2 error vs the CPU oracle";
    result.rpb_bytes = bytes_of(*grad_rpb);
    std::printf("    grad_rpb rel-L2 %.3e\n", result.rpb_error);
  }

  const char* names[] = {"grad_q", "grad_k", "grad_v"};
  TestTensor* got[] = {&dq, &dk, &dv};
  TestTensor* want[] = {&dq_ref, &dk_ref, &dv_ref};
  double* errors[] = {&result.dq_error, &result.dk_error, &result.dv_error};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(test::any_nan(got[i]->host)) << names[i] << " not fully written (NaN poison left) or NaN produced";
    EXPECT_TRUE(got[i]->padding_untouched()) << names[i] << ": elements outside the view were written";
    *errors[i] = test::relative_l2(got[i]->host, want[i]->host);
    EXPECT_LE(*errors[i], tolerance(c.dtype)) << names[i] << " relative L2 error vs the CPU oracle";
  }
  // Structural zeros must be exact: a query row that attends no key (LSE = -inf) has grad_q 0, and a key
  // that no query attends (its grad_v row is 0 in the oracle) has grad_k and grad_v 0. (Gradients that
  // are 0 only by cancellation, e.g. a row attending a single key, are merely within tolerance.)
  const int64_t zeros_missed_q =
      count_nonzero_rows(dq.host, c.tokens_q, c.heads_q, [&](const std::vector<int64_t>& row) {
        std::vector<int64_t> at(row.begin(), row.end() - 1);
        return std::isinf(test::element_at(lse.host, at)) && test::element_at(lse.host, at) < 0;
      });
  EXPECT_EQ(zeros_missed_q, 0) << "grad_q: rows that attend no key are not exactly 0";
  auto key_unseen = [&](const std::vector<int64_t>& row) {
    std::vector<int64_t> at = row;
    for (int64_t e = 0; e < c.head_dim_v; ++e) {
      at.back() = e;
      if (test::element_at(dv_ref.host, at) != 0.0) return false;
    }
    return true;
  };
  EXPECT_EQ(count_nonzero_rows(dk.host, c.tokens_kv, c.heads_kv, key_unseen), 0)
      << "grad_k: keys no query attends are not exactly 0";
  EXPECT_EQ(count_nonzero_rows(dv.host, c.tokens_kv, c.heads_kv, key_unseen), 0)
      << "grad_v: keys no query attends are not exactly 0";

  result.dq_bytes = bytes_of(dq);
  result.dk_bytes = bytes_of(dk);
  result.dv_bytes = bytes_of(dv);
  test::for_each_offset(dq.host, [&](int64_t off) {
    result.dq_values.push_back(detail::load_as_double(dq.host.data, dq.host.dtype, off));
  });
  test::for_each_offset(dk.host, [&](int64_t off) {
    result.dk_values.push_back(detail::load_as_double(dk.host.data, dk.host.dtype, off));
  });
  test::for_each_offset(dv.host, [&](int64_t off) {
    result.dv_values.push_back(detail::load_as_double(dv.host.data, dv.host.dtype, off));
  });
  std::printf("    [%s %s, kv_splits %d] rel-L2 dq %.3e dk %.3e dv %.3e\n", std::string(dtype_name(c.dtype)).c_str(),
              c.deterministic ? "deterministic" : "fast", c.kv_splits, result.dq_error, result.dk_error,
              result.dv_error);
  return result;
}

// Every registry config that can run the case on device 0 (the portable tier, and the Hopper tier on a
// compute-capability 9.0 device) at the width the case runs on there: each case runs on each of them,
// forced through ATTNKIT_FMHA_BACKWARD_CONFIG.
std::vector<std::string> backward_configs_for(const Case& c) {
  cuda::fmha::FmhaDevice device = cuda::fmha::fmha_device(0);
  device.portable_only = c.rpb.has_value();  // the Hopper dK/dV kernel adds no positional bias
  const auto policy = cuda::fmha::fmha_backward_policy_for(c.mask.kind);
  const int width = cuda::fmha::fmha_backward_width_on_device(c.dtype, c.head_dim, c.head_dim_v, policy, device);
  std::vector<std::string> names;
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.dtype == c.dtype && k.config.head_dim == width && k.config.policy == policy &&
        cuda::fmha::fmha_backward_config_fits(k.config, device)) {
      names.push_back(cuda::fmha::fmha_backward_config_name(k.config));
    }
  }
  return names;
}

const cuda::fmha::FmhaBackwardKernel* backward_kernel_named(const std::string& name) {
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (cuda::fmha::fmha_backward_config_name(k.config) == name) return &k;
  }
  return nullptr;
}

bool is_hopper_config(const std::string& name) {
  const cuda::fmha::FmhaBackwardKernel* k = backward_kernel_named(name);
  return k != nullptr && k->config.architecture == 90;
}

// --- Q tiles at window origins (dK/dV kernels, KvBoxSchedule) ------------------------------------------

// The window rule, extents and box shapes of a box-policy case along each of its dimensions, as the backward
// launch sets them for Q tiles of 2^block_m_log2 and KV tiles of 2^block_n_log2 tokens (kv_halves: the Hopper
// kernel's) with Q tiles at `origins`.
struct BoxWalk {
  int dims = 0;
  std::array<cuda::WindowRule, kMaxTokenDims> rule{};
  std::array<int64_t, kMaxTokenDims> n_q{1, 1, 1};
  std::array<int64_t, kMaxTokenDims> n_kv{1, 1, 1};
  std::array<int64_t, kMaxTokenDims> dilation{1, 1, 1};
  cuda::fmha::BoxShapes shapes{};
};

BoxWalk box_walk_of(const Case& c, int block_m_log2, int block_n_log2, bool kv_halves, cuda::KvTileOrigin origins) {
  BoxWalk w;
  if (c.mask.kind == MaskKind::neighborhood) {
    w.dims = static_cast<int>(c.tokens_q.size());
    std::array<int64_t, kMaxTokenDims> extents{1, 1, 1};
    for (int d = 0; d < w.dims; ++d) extents[static_cast<size_t>(d)] = c.tokens_q[static_cast<size_t>(d)];
    const cuda::fmha::BoxGeometry g = cuda::fmha::neighborhood_geometry(w.dims, c.mask.neighborhood, extents);
    w.shapes = cuda::fmha::choose_backward_box_shapes(g, block_m_log2, block_n_log2, kv_halves, origins);
    for (size_t d = 0; d < static_cast<size_t>(w.dims); ++d) {
      w.rule[d] = g.rule[d];
      w.n_q[d] = w.n_kv[d] = g.extent[d];
      w.dilation[d] = g.dilation[d];
    }
    return w;
  }
  // Flat masks: one dimension over the sequences.
  w.dims = 1;
  w.n_q[0] = product(c.tokens_q);
  w.n_kv[0] = product(c.tokens_kv);
  if (c.mask.kind == MaskKind::causal) {
    w.rule[0].kind = cuda::WindowKind::prefix;
    w.rule[0].prefix_offset = c.mask.causal_alignment == CausalAlignment::bottom_right ? w.n_kv[0] - w.n_q[0] : 0;
  }
  w.shapes.q_log2[0] = block_m_log2;
  w.shapes.kv_log2[0] = block_n_log2;
  return w;
}

// dK/dV CTAs of one (batch, KV head) whose Q tiles start off the Q box grid in some dimension.
int64_t ctas_with_window_origins(const BoxWalk& w) {
  return test::ctas_with_window_origins(
      w.dims, w.n_kv, w.dilation, w.shapes.kv_log2, w.shapes.q_log2,
      [&](size_t d, int64_t group, int64_t k, int64_t n_kv) {
        const int64_t n_q = detail::dilation_group_size(w.n_q[d], w.dilation[d], group);
        return cuda::dim_query_tiles(w.rule[d], k, int64_t{1} << w.shapes.kv_log2[d], n_q, n_kv, w.shapes.q_log2[d],
                                     cuda::KvTileOrigin::window);
      });
}

// Whether the Hopper dK/dV kernel `config` walks the same visits in both modes: the same box shapes, and no
// CTA's Q tiles moved off the grid in fast mode (the deterministic mode keeps them aligned). KV tiles of 128
// keys are scored by halves (two MMA warpgroups), those of 64 whole.
bool hopper_modes_walk_alike(const Case& c, const std::string& config) {
  if (c.mask.kind != MaskKind::none && c.mask.kind != MaskKind::causal && c.mask.kind != MaskKind::neighborhood) {
    return true;  // tile lists
  }
  const int block_n = backward_kernel_named(config)->config.block_n;
  const int kv_log2 = block_n == 128 ? 7 : 6;
  const BoxWalk fast = box_walk_of(c, 6, kv_log2, block_n == 128, cuda::KvTileOrigin::window);
  const BoxWalk exact = box_walk_of(c, 6, kv_log2, block_n == 128, cuda::KvTileOrigin::aligned);
  return fast.shapes.q_log2 == exact.shapes.q_log2 && fast.shapes.kv_log2 == exact.shapes.kv_log2 &&
         ctas_with_window_origins(fast) == 0;
}

// Each case below asserts that some of its CTAs get window origins with the Hopper (64 x 128, halves) or
// the portable (64 x 64) tiles, so that it keeps covering them.
void expect_window_origins(const Case& c) {
  EXPECT_GT(ctas_with_window_origins(box_walk_of(c, 6, 7, true, cuda::KvTileOrigin::window)) +
                ctas_with_window_origins(box_walk_of(c, 6, 6, false, cuda::KvTileOrigin::window)),
            0)
      << "no dK/dV CTA of this case starts its Q tiles off the box grid: it no longer tests window origins";
}

class CudaFmhaBackward : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }
  // The case on every config backward_configs_for names, or on those of them `only` accepts (e.g. the kernels a
  // forced setting reaches), in both dtypes.
  void run_both_dtypes(Case c, uint64_t seed, bool (*only)(const cuda::fmha::FmhaBackwardConfig&) = nullptr) {
    bool any = false;
    bool ran = false;
    for (DType dtype : {DType::f16, DType::bf16}) {
      c.dtype = dtype;
      if (!compiled_for(c)) continue;
      any = true;
      SCOPED_TRACE(std::string(dtype_name(dtype)));
      for (const std::string& config : backward_configs_for(c)) {
        if (only != nullptr && !only(backward_kernel_named(config)->config)) continue;
        ran = true;
        SCOPED_TRACE(config);
        const test::ScopedEnvironment forced("ATTNKIT_FMHA_BACKWARD_CONFIG", config);
        run_both_modes(c, seed, !is_hopper_config(config) || hopper_modes_walk_alike(c, config));
      }
      ++seed;
    }
    if (!any) {
      GTEST_SKIP() << "not compiled in this kernel set: head dims " << c.head_dim << "/" << c.head_dim_v
                   << "; compiled: " << cuda::fmha::fmha_backward_compiled_summary();
    }
    if (!ran) GTEST_SKIP() << "no compiled config of this case runs on this device with the property the test needs";
  }
  // The case in fast mode, then in deterministic mode on the same inputs (same seed): both against the
  // oracle (run_case), and against each other; grad_k and grad_v bit-identical when the dK/dV kernel walks
  // the same visits in both modes (same_visits), else within the dtype's tolerance.
  static void run_both_modes(Case c, uint64_t seed, bool same_visits = true) {
    CaseResult fast;
    CaseResult exact;
    {
      SCOPED_TRACE("fast mode");
      c.deterministic = false;
      fast = run_case(c, seed);
    }
    {
      SCOPED_TRACE("deterministic mode");
      c.deterministic = true;
      exact = run_case(c, seed);
    }
    if (same_visits) {
      EXPECT_TRUE(fast.dk_bytes == exact.dk_bytes) << "grad_k differs between fast and deterministic mode";
      EXPECT_TRUE(fast.dv_bytes == exact.dv_bytes) << "grad_v differs between fast and deterministic mode";
    } else {
      EXPECT_LE(relative_l2(fast.dk_values, exact.dk_values), tolerance(c.dtype))
          << "grad_k: relative L2 gap between fast and deterministic mode (Hopper: Q tiles at window / aligned "
             "origins)";
      EXPECT_LE(relative_l2(fast.dv_values, exact.dv_values), tolerance(c.dtype))
          << "grad_v: relative L2 gap between fast and deterministic mode (Hopper: Q tiles at window / aligned "
             "origins)";
    }
    EXPECT_TRUE(fast.rpb_bytes == exact.rpb_bytes) << "grad_rpb differs between fast and deterministic mode";
    const double dq_gap = relative_l2(fast.dq_values, exact.dq_values);
    EXPECT_LE(dq_gap, tolerance(c.dtype)) << "grad_q: relative L2 gap between fast and deterministic mode";
    std::printf("    [%s] grad_q fast vs deterministic rel-L2 %.3e\n", std::string(dtype_name(c.dtype)).c_str(),
                dq_gap);
  }
};

// --- dense -------------------------------------------------------------------------------------

TEST_F(CudaFmhaBackward, SmallDenseMatchesOracleAtOddExtents) {
  Case c;
  run_both_dtypes(c, 1000);
}

// Fast mode converts dQ inside the dK/dV kernel (its last CTA) while the accumulator holds at most
// kFusedDqConvertElements elements (B * Hq * Q tiles * 64 rows * D), and in a kernel of its own above: both
// sides of the line, with several KV tiles (several CTAs add into every Q tile before the last converts).
TEST_F(CudaFmhaBackward, DqConvertedByTheLastDkDvCtaOrItsOwnKernelEitherSideOfTheLine) {
  Case c;
  c.batch = 1;
  c.heads_q = c.heads_kv = 2;
  c.head_dim = c.head_dim_v = 64;
  for (const int64_t tokens : {int64_t{512}, int64_t{520}}) {
    c.tokens_q = c.tokens_kv = {tokens};
    const int64_t elements = c.batch * c.heads_q * ((tokens + 63) / 64) * 64 * c.head_dim;
    SCOPED_TRACE((elements <= cuda::fmha::kFusedDqConvertElements ? "fused convert, " : "convert kernel, ") +
                 std::to_string(tokens) + " tokens");
    run_both_dtypes(c, 1005 + tokens);
  }
  c.tokens_q = c.tokens_kv = {130};  // three Q tiles; on 2 x 8 heads the accumulator is past the line
  c.batch = 2;
  c.heads_q = c.heads_kv = 8;
  c.mask = causal_mask();
  SCOPED_TRACE("causal, convert kernel");
  run_both_dtypes(c, 1011);
}

// The Hopper dK/dV kernel with several KV heads per CTA in turn (box policies, fast mode; the deterministic mode
// and the portable tier run one), forced to 2, 3 and 5 so that the last CTA of a batch may hold fewer heads than
// the others: K and V reload per head into the tiles the previous head's dK and dV went out through, the visit
// schedule and mask tables are reused. Dense at odd extents, causal rows without keys, grouped heads, 1-D to 3-D
// windows, head dims 64 and 32; each also run in the deterministic mode and compared.
// The configs whose dK/dV kernel runs several KV heads per CTA (the Hopper tier up to D 64): a forced heads per CTA
// reaches no other, so the tests of that setting run these alone.
bool runs_several_heads_per_cta(const cuda::fmha::FmhaBackwardConfig& config) { return config.several_heads_per_cta; }

TEST_F(CudaFmhaBackward, SeveralHeadsPerCtaMatchTheOracle) {
  uint64_t seed = 1900;
  for (int heads_per_cta : {2, 3, 5}) {
    SCOPED_TRACE("heads per CTA " + std::to_string(heads_per_cta));
    const ForcedHeadsPerCta forced(heads_per_cta);
    Case c;
    c.heads_q = c.heads_kv = 5;
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);  // dense, 77 queries against 131 keys
    c.heads_q = 8;
    c.heads_kv = 4;  // two query heads per KV head
    c.mask = causal_mask(CausalAlignment::bottom_right);
    c.tokens_q = {300};
    c.tokens_kv = {200};  // the first 100 rows see no key
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);
    c.heads_q = c.heads_kv = 5;
    c.tokens_q = c.tokens_kv = {700};
    c.mask = neighborhood({nd(64)});
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);
    c.tokens_q = c.tokens_kv = {45, 53};
    c.mask = neighborhood({nd(7), nd(5, 1, 1, true)});
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);
    c.batch = 3;
    c.tokens_q = c.tokens_kv = {7, 30, 29};
    c.mask = neighborhood({nd(3), nd(7), nd(7)});
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);
    c.head_dim = c.head_dim_v = 32;
    run_both_dtypes(c, seed++, runs_several_heads_per_cta);
  }
}

// A small case of the above for compute-sanitizer: three KV heads per CTA, the last CTA of a batch with two.
TEST_F(CudaFmhaBackward, SeveralHeadsPerCtaOn2DWindowsWithGroupedHeads) {
  const ForcedHeadsPerCta forced(3);
  Case c;
  c.batch = 1;
  c.heads_q = 10;
  c.heads_kv = 5;
  c.tokens_q = c.tokens_kv = {20, 24};
  c.mask = neighborhood({nd(7), nd(5)});
  run_both_dtypes(c, 1930, runs_several_heads_per_cta);
}

// Several KV heads per CTA over repeated calls of one dense bf16 problem of B x H x S tokens at D 64, eight heads
// a CTA, on every config that runs several: every call must succeed and give grad_k and grad_v bit-identical to the
// first call's (each CTA sums them in a fixed order), the last call's grad_q within 1e-4 of it (fp32 atomics); the
// first call agrees with the deterministic mode (one head a CTA) within the dtype's tolerance. Every 8th call and
// the last are read back.
void expect_several_heads_per_cta_repeat(int64_t batch, int64_t heads, int64_t tokens, int calls) {
  Case c;
  c.dtype = DType::bf16;
  c.batch = batch;
  c.heads_q = c.heads_kv = heads;
  c.tokens_q = c.tokens_kv = {tokens};
  if (!compiled_for(c)) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  std::vector<std::string> configs;
  for (const std::string& config : backward_configs_for(c)) {
    if (runs_several_heads_per_cta(backward_kernel_named(config)->config)) configs.push_back(config);
  }
  if (configs.empty()) GTEST_SKIP() << "no backward config with several KV heads per CTA runs on this device";
  std::mt19937_64 rng(1940 + static_cast<uint64_t>(tokens));
  test::DeviceAttentionProblem problem(c.dtype, batch, c.tokens_q, heads, c.head_dim, rng);
  TestTensor& dq = problem.grad_q;
  TestTensor& dk = problem.grad_k;
  TestTensor& dv = problem.grad_v;
  RunOptions options;
  options.backend = Backend::cuda;
  attention_forward(problem.forward(), options);
  const ForcedHeadsPerCta forced(8);  // the backward's (the forward above ran on the rule's count)
  AttentionBackward backward = problem.backward();
  auto values = [](const TestTensor& t) {
    std::vector<double> x;
    test::for_each_offset(t.host,
                          [&](int64_t off) { x.push_back(detail::load_as_double(t.host.data, t.host.dtype, off)); });
    return x;
  };
  for (const std::string& config : configs) {
    SCOPED_TRACE(config);
    const test::ScopedEnvironment forced_config("ATTNKIT_FMHA_BACKWARD_CONFIG", config);
    backward.deterministic = true;
    attention_backward(backward, options);
    dq.download();
    dk.download();
    dv.download();
    const std::vector<double> exact_dq = values(dq), exact_dk = values(dk), exact_dv = values(dv);
    backward.deterministic = false;
    std::vector<std::byte> first_dk, first_dv;
    std::vector<double> first_dq;
    for (int call = 0; call < calls; ++call) {
      for (TestTensor* t : {&dq, &dk, &dv}) {
        expect_cuda(cudaMemset(t->device.data, 0xff, t->bytes), "cudaMemset (poisoned gradients)");
      }
      attention_backward(backward, options);
      const bool last = call + 1 == calls;
      if (call > 0 && call % 8 != 0 && !last) continue;
      dk.download();
      dv.download();
      const auto* dk_bytes = reinterpret_cast<const std::byte*>(dk.buffer.view.data);
      const auto* dv_bytes = reinterpret_cast<const std::byte*>(dv.buffer.view.data);
      if (call == 0) {
        dq.download();
        first_dk.assign(dk_bytes, dk_bytes + dk.bytes);
        first_dv.assign(dv_bytes, dv_bytes + dv.bytes);
        first_dq = values(dq);
        EXPECT_LE(relative_l2(values(dk), exact_dk), tolerance(c.dtype)) << "grad_k against the deterministic mode";
        EXPECT_LE(relative_l2(values(dv), exact_dv), tolerance(c.dtype)) << "grad_v against the deterministic mode";
        EXPECT_LE(relative_l2(first_dq, exact_dq), tolerance(c.dtype)) << "grad_q against the deterministic mode";
        continue;
      }
      ASSERT_TRUE(std::equal(first_dk.begin(), first_dk.end(), dk_bytes)) << "grad_k of call " << call;
      ASSERT_TRUE(std::equal(first_dv.begin(), first_dv.end(), dv_bytes)) << "grad_v of call " << call;
      if (last) {
        dq.download();
        EXPECT_LE(relative_l2(values(dq), first_dq), 1e-4) << "grad_q of the last call";
      }
    }
  }
}

// The two MMA warpgroups of the dK/dV kernel part after a head's epilogue, and the next head's K and V may already
// be loaded: a race between the epilogue's table of output rows and the next head's first dQ boxes (both in the
// first dQ buffer) would show only now and then. Without the barrier that separates them B8 H16 S2048 hits an
// illegal address within a few hundred calls on an H200.
TEST_F(CudaFmhaBackward, SeveralHeadsPerCtaStayCorrectOverRepeatedCalls) {
  expect_several_heads_per_cta_repeat(8, 16, 2048, 400);
}

// The same on a problem small enough for compute-sanitizer's racecheck and memcheck.
TEST_F(CudaFmhaBackward, SeveralHeadsPerCtaOnADenseProblemForSanitizers) {
  expect_several_heads_per_cta_repeat(1, 8, 256, 2);
}

TEST(FmhaSm90BackwardHeadsPerCta, HeadsPerCtaFollowTheWaveModel) {
  using cuda::fmha_sm90::choose_backward_heads_per_cta;
  const cuda::fmha_sm90::CtaSlots one_per_sm{132, 1};
  cuda::fmha::FmhaBackwardParams p;
  p.kv_space.extent[0] = 4096;  // dense, 4096 keys a query: long CTAs, whole waves
  p.heads_kv = 8;
  p.batch = 32;
  p.total_kv_tiles = 8;  // 2048 CTAs with one KV head each: 8 per CTA make 2 waves on 132 SMs
  EXPECT_EQ(choose_backward_heads_per_cta(p, true, one_per_sm), 8);
  EXPECT_EQ(choose_backward_heads_per_cta(p, false, one_per_sm), 1);  // tile lists, splits, ordered dQ
  p.batch = 1;                                                        // 64 CTAs: one wave already
  EXPECT_EQ(choose_backward_heads_per_cta(p, true, one_per_sm), 1);
  p.batch = 32;
  p.dims = 1;
  p.rule[0].kind = cuda::WindowKind::prefix;  // causal: at most two heads
  EXPECT_EQ(choose_backward_heads_per_cta(p, true, one_per_sm), 2);
  p.heads_kv = 1;
  EXPECT_EQ(choose_backward_heads_per_cta(p, true, one_per_sm), 1);
  // The 64-key rows (two CTAs per SM, 264 slots) on na2d 20² K3 B64 H4, ten KV tiles a head: a window of 9 keys
  // makes short CTAs, whose partial last wave counts by its fraction: four heads a CTA (2.4 waves x 4.3) beat two
  // (4.8 x 2.3), which whole waves pick (3 x 4.3 against 5 x 2.3).
  cuda::fmha::FmhaBackwardParams small;
  small.dims = 2;
  for (int d = 0; d < 2; ++d) {
    small.kv_space.extent[d] = 20;
    small.rule[d].kind = cuda::WindowKind::neighborhood;
    small.rule[d].window = 3;
  }
  small.heads_kv = 4;
  small.batch = 64;
  small.total_kv_tiles = 10;
  const cuda::fmha_sm90::CtaSlots two_per_sm{264, 2};
  EXPECT_EQ(choose_backward_heads_per_cta(small, true, two_per_sm), 4);
  for (int d = 0; d < 2; ++d) {  // K23 on 32²: 529 keys, long CTAs, whole waves
    small.kv_space.extent[d] = 32;
    small.rule[d].window = 23;
  }
  EXPECT_EQ(choose_backward_heads_per_cta(small, true, two_per_sm), 2);
}

TEST_F(CudaFmhaBackward, DenseHeadDim128MatchesOracle) {
  Case c;
  c.head_dim = c.head_dim_v = 128;
  c.tokens_q = {200};
  c.tokens_kv = {129};
  run_both_dtypes(c, 1010);
}

TEST_F(CudaFmhaBackward, ValueHeadDimMayDifferFromQueryHeadDim) {
  Case c;
  c.head_dim = 128;
  c.head_dim_v = 64;
  run_both_dtypes(c, 1030);
  c.head_dim = 48;
  c.head_dim_v = 96;
  run_both_dtypes(c, 1035);
}

// One query token against a few keys (with a single key the gradients of q and k are 0 by cancellation,
// which leaves nothing but rounding noise to compare).
TEST_F(CudaFmhaBackward, SingleQueryTokenAgainstFewKeys) {
  Case c;
  c.tokens_q = {1};
  c.tokens_kv = {3};
  c.batch = 3;
  run_both_dtypes(c, 1040);
}

TEST_F(CudaFmhaBackward, GroupedQueryAndMultiQueryHeadsSumKeyValueGradientsOverTheGroup) {
  Case c;
  c.heads_q = 6;
  c.heads_kv = 2;
  run_both_dtypes(c, 1050);
  c.heads_kv = 1;
  run_both_dtypes(c, 1055);
}

TEST_F(CudaFmhaBackward, SmallStridedViewsWithPaddedHeads) {
  Case c;
  c.layout = Layout::padded_heads;
  run_both_dtypes(c, 1060);
}

TEST_F(CudaFmhaBackward, CustomScale) {
  Case c;
  c.scale = 0.37;
  run_both_dtypes(c, 1070);
}

TEST_F(CudaFmhaBackward, MultiDimTokensDenseCrossAttention) {
  Case c;
  c.tokens_q = {7, 11};
  c.tokens_kv = {90};
  run_both_dtypes(c, 1080);
}

// --- causal ------------------------------------------------------------------------------------

TEST_F(CudaFmhaBackward, SmallCausalTopLeftWithDifferentLengths) {
  Case c;
  c.mask = causal_mask(CausalAlignment::top_left);
  c.tokens_q = {100};
  c.tokens_kv = {157};
  run_both_dtypes(c, 1100);
  c.tokens_q = {157};
  c.tokens_kv = {100};
  run_both_dtypes(c, 1105);
}

TEST_F(CudaFmhaBackward, CausalBottomRightRowsWithoutKeysGetZeroGradients) {
  Case c;
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_q = {150};
  c.tokens_kv = {60};  // queries 0..89 see no key: their grad_q rows must be exactly 0
  run_both_dtypes(c, 1110);
  c.tokens_q = {70};
  c.tokens_kv = {200};  // query i sees keys [0, i + 130]: keys 0..130 are seen by every query
  run_both_dtypes(c, 1115);
}

TEST_F(CudaFmhaBackward, CausalOverMultiDimTokensWithNonCollapsibleStrides) {
  Case c;
  c.mask = causal_mask();
  c.tokens_q = {9, 13};
  c.tokens_kv = {9, 13};
  c.layout = Layout::noncollapsible_tokens;
  run_both_dtypes(c, 1120);
}

// --- neighborhood ------------------------------------------------------------------------------

TEST_F(CudaFmhaBackward, SmallNeighborhood1DWithDilationStrideAndCausal) {
  Case c;
  c.tokens_q = c.tokens_kv = {300};
  c.mask = neighborhood({nd(31, 3, 2, true)});
  run_both_dtypes(c, 1200);
  c.mask = neighborhood({nd(17, 2, 5, false)});
  run_both_dtypes(c, 1205);
}

TEST_F(CudaFmhaBackward, Neighborhood2DMixedPerDimensionSettings) {
  Case c;
  c.tokens_q = c.tokens_kv = {13, 19};
  c.mask = neighborhood({nd(5, 2, 1, false), nd(7, 1, 2, true)});
  run_both_dtypes(c, 1210);
}

TEST_F(CudaFmhaBackward, Neighborhood2DLargeWindowOnStridedViews) {
  Case c;
  c.tokens_q = c.tokens_kv = {33, 29};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.layout = Layout::noncollapsible_tokens;
  c.mask = neighborhood({nd(15), nd(13, 2)});
  run_both_dtypes(c, 1220);
}

TEST_F(CudaFmhaBackward, Neighborhood3DMixedPerDimensionSettings) {
  Case c;
  c.tokens_q = c.tokens_kv = {6, 9, 10};
  c.mask = neighborhood({nd(3, 1, 1, true), nd(5, 1, 2, false), nd(3, 3, 1, false)});
  run_both_dtypes(c, 1230);
}

// Without dilation the Hopper kernels add dQ partials through the accumulator's TMA map: 2-D tokens
// with the batch as a coordinate of its own, 3-D tokens with the batch folded into the outermost one;
// tiles cross the odd extents (out-of-bounds rows and columns must be left alone).
TEST_F(CudaFmhaBackward, NeighborhoodWithoutDilationAtOddExtentsOverBatches) {
  Case c;
  c.tokens_q = c.tokens_kv = {19, 23};
  c.mask = neighborhood({nd(7), nd(9, 1, 2)});
  run_both_dtypes(c, 1250);
  c.tokens_q = c.tokens_kv = {5, 11, 13};
  c.head_dim = c.head_dim_v = 128;
  c.mask = neighborhood({nd(3), nd(5), nd(7, 1, 1, true)});
  run_both_dtypes(c, 1255);
}

// Relative positional bias (NATTEN <= 0.17 rpb) and its gradient on the portable tier: fp32 tables and
// tables in the inputs' dtype, strided, dilation, GQA, odd extents, 1-D to 3-D, KV-parallel splits.
TEST_F(CudaFmhaBackward, PositionalBias1DAnd2DWithTheirGradientMatchTheOracle) {
  Case c;
  c.tokens_q = c.tokens_kv = {150};
  c.mask = neighborhood({nd(9, 2)});
  c.rpb = DType::f32;
  run_both_dtypes(c, 900);
  c.tokens_q = c.tokens_kv = {13, 19};
  c.mask = neighborhood({nd(5, 2), nd(7)});
  c.rpb_padded = true;
  run_both_dtypes(c, 905);
}

TEST_F(CudaFmhaBackward, PositionalBias3DInTheInputsDtypeWithKvSplits) {
  Case c;
  c.tokens_q = c.tokens_kv = {6, 11, 10};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.mask = neighborhood({nd(3), nd(5, 2), nd(3, 3)});
  c.rpb_padded = true;
  for (int32_t splits : {1, 3}) {
    c.kv_splits = splits;
    for (DType dtype : {DType::f16, DType::bf16}) {
      c.dtype = dtype;
      c.rpb = dtype;
      if (!compiled_for(c)) continue;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", kv_splits " + std::to_string(splits));
      for (const std::string& config : backward_configs_for(c)) {
        SCOPED_TRACE(config);
        const test::ScopedEnvironment forced("ATTNKIT_FMHA_BACKWARD_CONFIG", config);
        run_both_modes(c, 910, !is_hopper_config(config) || hopper_modes_walk_alike(c, config));
      }
    }
  }
}

TEST_F(CudaFmhaBackward, PositionalBiasRunsOnThePortableTierByDefault) {
  Case c;
  c.tokens_q = c.tokens_kv = {24, 24};
  c.heads_q = c.heads_kv = 2;
  c.mask = neighborhood({nd(7), nd(7)});
  c.rpb = DType::f32;
  if (!compiled_for(c)) GTEST_SKIP() << "not compiled in this kernel set: f16 head dim 64";
  EXPECT_FALSE(backward_configs_for(c).empty()) << "no portable backward config can run a positional bias";
  run_case(c, 920);  // the plan's own choice, no forced config
}

TEST_F(CudaFmhaBackward, Neighborhood2DHeadDim128WithGroupedHeads) {
  Case c;
  c.tokens_q = c.tokens_kv = {24, 21};
  c.head_dim = c.head_dim_v = 128;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.mask = neighborhood({nd(7), nd(9, 2)});
  run_both_dtypes(c, 1240);
}

TEST_F(CudaFmhaBackward, CausalHeadDim128WithGroupedHeads) {
  Case c;
  c.head_dim = c.head_dim_v = 128;
  c.heads_q = 6;
  c.heads_kv = 2;
  c.tokens_q = {130};
  c.tokens_kv = {130};
  c.mask = causal_mask();
  run_both_dtypes(c, 1130);
}

// --- Q tiles at window origins ---------------------------------------------------------------------
// The dK/dV kernels start a CTA's Q tiles at the first query that sees its KV tile (dim_query_tiles) when
// that needs fewer tiles than the aligned ones (fast mode on both tiers, deterministic mode on the portable
// tier; the dQ kernel's KV tiles start at window origins as the forward's): Q / dO rows and row statistics
// gathered from any query (the statistics row by row from the grid's tiles), tiles moved back to end at
// the extent, masks, dQ additions (atomics, TMA boxes) and the positional bias relative to such origins.

TEST_F(CudaFmhaBackward, Neighborhood1DQTilesStartAtTheWindow) {
  Case c;
  c.tokens_q = c.tokens_kv = {1000};  // the last KV tiles' Q tiles move back to end at query 1000
  c.heads_q = 2;
  c.heads_kv = 1;
  uint64_t seed = 1600;
  for (const NeighborhoodDim& d : {nd(64), nd(64, 3), nd(45, 2, 3), nd(50, 1, 5)}) {
    c.mask = neighborhood({d});
    expect_window_origins(c);
    run_both_dtypes(c, seed++);
  }
}

TEST_F(CudaFmhaBackward, Neighborhood2DQTilesStartAtTheWindow) {
  Case c;
  c.heads_q = 2;
  c.heads_kv = 1;
  uint64_t seed = 1610;
  for (const test::WindowOriginGrid& grid : test::window_origin_grids_2d()) {
    c.tokens_q = c.tokens_kv = grid.tokens;
    c.mask = grid.mask;
    if (grid.noncollapsible_tokens) c.layout = Layout::noncollapsible_tokens;
    expect_window_origins(c);
    run_both_dtypes(c, seed);
    seed += 2;
  }
}

TEST_F(CudaFmhaBackward, Neighborhood3DQTilesStartAtTheWindow) {
  Case c;
  c.batch = 3;  // on Hopper, 3-D dQ boxes fold the batch into the outermost token coordinate
  c.heads_q = 2;
  c.heads_kv = 1;
  c.tokens_q = c.tokens_kv = {8, 30, 29};
  c.mask = neighborhood({nd(3), nd(7), nd(7)});
  expect_window_origins(c);
  run_both_dtypes(c, 1620);
  c.tokens_q = c.tokens_kv = {9, 30, 29};
  c.mask = neighborhood({nd(3, 1, 1, true), nd(7, 2), nd(5)});
  expect_window_origins(c);
  run_both_dtypes(c, 1622);
}

TEST_F(CudaFmhaBackward, Neighborhood2DQTilesStartAtTheWindowWithGroupedHeadsAndHeadDim128) {
  Case c;
  c.head_dim = c.head_dim_v = 128;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.tokens_q = c.tokens_kv = {56, 56};
  c.mask = neighborhood({nd(7), nd(7)});
  expect_window_origins(c);
  run_both_dtypes(c, 1630);
}

TEST_F(CudaFmhaBackward, Neighborhood2DQTilesStartAtTheWindowWithKvSplits) {
  Case c;
  c.tokens_q = c.tokens_kv = {56, 56};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.mask = neighborhood({nd(7), nd(7)});
  c.kv_splits = 3;
  expect_window_origins(c);
  run_both_dtypes(c, 1640);
}

TEST_F(CudaFmhaBackward, CausalBottomRightQTilesStartAtTheFirstQueryThatSeesTheKeys) {
  Case c;
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_q = {1000};
  c.tokens_kv = {1005};  // keys [128, 256) are seen from query 123 on: 14 Q tiles of 64 from 104, not 15
  expect_window_origins(c);
  run_both_dtypes(c, 1650);
}

TEST_F(CudaFmhaBackward, PositionalBiasWithQTilesAtTheWindow) {
  Case c;
  c.rpb = DType::f32;
  c.tokens_q = c.tokens_kv = {1000};
  c.mask = neighborhood({nd(63)});
  expect_window_origins(c);
  run_both_dtypes(c, 1660);
  c.tokens_q = c.tokens_kv = {56, 56};
  c.mask = neighborhood({nd(7), nd(7, 2)});
  expect_window_origins(c);
  run_both_dtypes(c, 1662);
}

// --- head dim 32 ---------------------------------------------------------------------------------
// D 32 runs on the narrowest width with a kernel that fits the device (fmha_backward_width_on_device): on
// compute capability 9.0 the Hopper D 32 kernels where the build has them (64-byte swizzled rows, one dQ
// box of 32 columns), else the 64-wide kernels with zero-padded columns. Every mask family, both modes,
// odd extents, grouped heads, Dv != D within the width and KV splits.

TEST_F(CudaFmhaBackward, HeadDim32DenseMatchesOracleAtOddExtents) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  run_both_dtypes(c, 1720);
}

TEST_F(CudaFmhaBackward, HeadDim32GroupedAndMultiQueryHeadsSumKeyValueGradientsOverTheGroup) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = {150};
  c.tokens_kv = {201};
  c.heads_q = 6;
  c.heads_kv = 2;
  run_both_dtypes(c, 1722);
  c.heads_kv = 1;
  c.mask = causal_mask();
  run_both_dtypes(c, 1724);
}

TEST_F(CudaFmhaBackward, HeadDim32CausalBottomRightRowsWithoutKeysGetZeroGradients) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_q = {150};
  c.tokens_kv = {60};  // queries 0..89 see no key: their grad_q rows must be exactly 0
  run_both_dtypes(c, 1726);
  c.tokens_q = {70};
  c.tokens_kv = {200};
  run_both_dtypes(c, 1728);
}

// D 32 with Dv 24 keeps the dQ accumulator's TMA map (32 columns); D 24 has none (a box would be wider
// than the rows) and adds dQ with red.global. Either way the columns past D and Dv are zero-filled.
TEST_F(CudaFmhaBackward, HeadDim32ValueHeadDimMayDifferWithinTheWidth) {
  Case c;
  c.head_dim = 32;
  c.head_dim_v = 24;
  run_both_dtypes(c, 1730);
  c.head_dim = 24;
  c.head_dim_v = 32;
  c.mask = neighborhood({nd(7), nd(9, 1, 2)});
  c.tokens_q = c.tokens_kv = {19, 23};
  run_both_dtypes(c, 1732);
}

// Without dilation the Hopper kernels add dQ through the accumulator's TMA map (1-D; 2-D with the batch as
// a coordinate of its own; 3-D with the batch folded), with dilation every thread adds its own pairs.
TEST_F(CudaFmhaBackward, HeadDim32Neighborhood1DWithAndWithoutDilation) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = c.tokens_kv = {300};
  c.mask = neighborhood({nd(17, 1, 2)});
  run_both_dtypes(c, 1734);
  c.mask = neighborhood({nd(31, 3, 2, true)});
  run_both_dtypes(c, 1736);
}

TEST_F(CudaFmhaBackward, HeadDim32Neighborhood2DWithAndWithoutDilation) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = c.tokens_kv = {19, 23};
  c.mask = neighborhood({nd(7), nd(9, 1, 2)});
  run_both_dtypes(c, 1738);
  c.tokens_q = c.tokens_kv = {13, 19};
  c.mask = neighborhood({nd(5, 2, 1, false), nd(7, 1, 2, true)});
  run_both_dtypes(c, 1740);
}

TEST_F(CudaFmhaBackward, HeadDim32Neighborhood3DWithAndWithoutDilation) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.batch = 3;
  c.tokens_q = c.tokens_kv = {5, 11, 13};
  c.mask = neighborhood({nd(3), nd(5), nd(7, 1, 1, true)});
  run_both_dtypes(c, 1742);
  c.batch = 2;
  c.tokens_q = c.tokens_kv = {6, 9, 10};
  c.mask = neighborhood({nd(3, 1, 1, true), nd(5, 1, 2, false), nd(3, 3, 1, false)});
  run_both_dtypes(c, 1744);
}

TEST_F(CudaFmhaBackward, HeadDim32Neighborhood2DQTilesStartAtTheWindow) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.heads_q = 2;
  c.heads_kv = 1;
  c.tokens_q = c.tokens_kv = {56, 56};
  c.mask = neighborhood({nd(7), nd(7)});
  expect_window_origins(c);
  run_both_dtypes(c, 1746);
}

TEST_F(CudaFmhaBackward, HeadDim32BlockMaskWithUnalignedBlocksPerHeadAndBatch) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = {150};
  c.tokens_kv = {170};
  c.mask = block_sparse_mask(TensorView{}, 24, 40);
  c.mask_batch = 2;
  c.mask_heads = 4;
  c.mask_density = 0.4;
  run_both_dtypes(c, 1748);
}

// The element mask's key-major words go through the producer's stage at D 32 (kStagedKeyWords).
TEST_F(CudaFmhaBackward, HeadDim32ElementMaskWithEmptyRowsGivesZeroGradientsForThem) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = {130};
  c.tokens_kv = {197};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_heads = 4;
  c.mask_density = 0.3;
  c.empty_rows_every = 7;
  run_both_dtypes(c, 1750);
}

TEST_F(CudaFmhaBackward, HeadDim32DeterministicModeIsBitIdenticalOverGridsOfSeveralWaves) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  {
    SCOPED_TRACE("dense: 5 visitors per Q tile, 160 CTAs");
    c.heads_q = c.heads_kv = 16;
    c.tokens_q = c.tokens_kv = {640};
    run_both_dtypes(c, 1752);
  }
  {
    SCOPED_TRACE("2-D neighborhood with stride, grouped heads");
    c.heads_q = 8;
    c.heads_kv = 4;
    c.mask = neighborhood({nd(13), nd(9, 1, 2)});
    c.tokens_q = c.tokens_kv = {60, 53};
    run_both_dtypes(c, 1754);
  }
}

TEST_F(CudaFmhaBackward, HeadDim32KvSplitsSumToTheOraclesGradients) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  c.tokens_q = {300};
  c.tokens_kv = {131};
  c.kv_splits = 3;
  run_both_dtypes(c, 1756);
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_kv = {400};
  run_both_dtypes(c, 1758);
}

// --- block and element masks -------------------------------------------------------------------

TEST_F(CudaFmhaBackward, SmallBlockMaskWithTileAlignedBlocks) {
  Case c;
  c.tokens_q = {200};
  c.tokens_kv = {250};
  c.mask = block_sparse_mask(TensorView{}, 64, 64);
  c.mask_density = 0.5;
  run_both_dtypes(c, 1300);
}

TEST_F(CudaFmhaBackward, BlockMaskWithUnalignedBlocksPerHeadAndBatch) {
  Case c;
  c.tokens_q = {150};
  c.tokens_kv = {170};
  c.mask = block_sparse_mask(TensorView{}, 24, 40);
  c.mask_batch = 2;
  c.mask_heads = 4;
  c.mask_density = 0.4;
  run_both_dtypes(c, 1310);
}

TEST_F(CudaFmhaBackward, MasksExpandedOverTheHeadsRunAsTheBroadcastMaskTheyAre) {
  Case c;
  c.tokens_q = {150};
  c.tokens_kv = {170};
  c.mask = block_sparse_mask(TensorView{}, 96, 80);  // blocks larger than the tiles, not aligned with them
  c.mask_heads_view = c.heads_q;
  c.mask_density = 0.4;
  run_both_dtypes(c, 1312);
  c.mask = element_sparse_mask(TensorView{});
  c.mask_batch = 2;
  run_both_dtypes(c, 1313);
}

TEST_F(CudaFmhaBackward, BlockMaskOfTileSizedBlocksDifferentPerHeadAndBatch) {
  Case c;
  c.tokens_q = {300};
  c.tokens_kv = {333};
  c.mask = block_sparse_mask(TensorView{}, 128, 128);
  c.mask_batch = 2;
  c.mask_heads = 4;
  c.mask_density = 0.4;
  run_both_dtypes(c, 1314);
}

TEST_F(CudaFmhaBackward, SmallElementMaskWithEmptyRowsGivesZeroGradientsForThem) {
  Case c;
  c.tokens_q = {130};
  c.tokens_kv = {97};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_heads = 4;
  c.mask_density = 0.3;
  c.empty_rows_every = 7;
  run_both_dtypes(c, 1320);
}

// Key extents that are a multiple of 16 with a contiguous mask: the tile classification reads whole
// 16-byte rows (the other tests' odd extents take the byte loads); partial and full tiles. (A mask sparse
// enough for empty tiles leaves most rows one key, whose dQ and dK are zero up to rounding: no relative
// error to compare; the forward test covers empty tiles.)
TEST_F(CudaFmhaBackward, ElementMaskWithWholeSixteenByteRows) {
  Case c;
  c.tokens_q = {200};
  c.tokens_kv = {256};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_batch = 2;  // one mask per batch: the second slice starts 200 x 256 bytes in
  for (const double density : {0.02, 0.5, 1.0}) {
    SCOPED_TRACE("density " + std::to_string(density));
    c.mask_density = density;
    run_both_dtypes(c, 1330 + static_cast<int>(density * 100));
  }
}

TEST_F(CudaFmhaBackward, ElementMaskHeadDim128WithEmptyRowsAndValueDim64) {
  Case c;
  c.tokens_q = {141};
  c.tokens_kv = {77};
  c.head_dim = 128;
  c.head_dim_v = 64;
  c.mask = element_sparse_mask(TensorView{});
  c.mask_density = 0.4;
  c.empty_rows_every = 5;
  run_both_dtypes(c, 1325);
}

TEST_F(CudaFmhaBackward, BlockMaskHeadDim96PerHead) {
  Case c;
  c.tokens_q = {100};
  c.tokens_kv = {190};
  c.head_dim = c.head_dim_v = 96;  // runs on the 128-wide kernel: part of the last dQ slices is padding
  c.mask = block_sparse_mask(TensorView{}, 32, 48);
  c.mask_heads = 4;
  c.mask_density = 0.5;
  run_both_dtypes(c, 1315);
}

TEST_F(CudaFmhaBackward, ElementMaskOnMultiDimTokensWithGroupedHeads) {
  Case c;
  c.tokens_q = c.tokens_kv = {9, 14};
  c.heads_q = 6;
  c.heads_kv = 2;
  c.mask = element_sparse_mask(TensorView{});
  c.mask_density = 0.7;
  c.layout = Layout::noncollapsible_tokens;
  run_both_dtypes(c, 1330);
}

// --- modes, streams, workspace, refusals -------------------------------------------------------

TEST_F(CudaFmhaBackward, DeterministicModeIsBitIdenticalAcrossRuns) {
  Case c;
  c.dtype = DType::bf16;
  c.deterministic = true;
  c.tokens_q = c.tokens_kv = {40, 37};
  c.heads_q = 4;
  c.heads_kv = 1;
  c.mask = neighborhood({nd(11), nd(9)});
  if (!compiled_for(c)) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  const CaseResult first = run_case(c, 1400);
  const CaseResult second = run_case(c, 1400);  // same seed: same inputs
  EXPECT_TRUE(first.dq_bytes == second.dq_bytes) << "grad_q differs between two deterministic runs";
  EXPECT_TRUE(first.dk_bytes == second.dk_bytes) << "grad_k differs between two deterministic runs";
  EXPECT_TRUE(first.dv_bytes == second.dv_bytes) << "grad_v differs between two deterministic runs";
}

// The Hopper tier's deterministic mode orders the dQ additions of the KV tiles that meet a Q tile
// (fmha_backward_dq_order.hpp): grids of several waves of CTAs (which wait only for CTAs launched before
// them), many visitors per Q tile, GQA heads, every mask family, the TMA reductions and (dilation) the
// per-thread reductions. Each case runs deterministic mode twice (run_case): the bits must agree.
TEST_F(CudaFmhaBackward, DeterministicModeIsBitIdenticalOverGridsOfSeveralWaves) {
  Case c;
  c.batch = 2;
  {
    SCOPED_TRACE("dense: 5 visitors per Q tile, 160 CTAs");
    c.heads_q = c.heads_kv = 16;
    c.tokens_q = c.tokens_kv = {640};
    run_both_dtypes(c, 1450);
  }
  {
    SCOPED_TRACE("causal, bottom-right, Sq < Sk: 264 CTAs");
    c.heads_q = c.heads_kv = 12;
    c.mask = causal_mask(CausalAlignment::bottom_right);
    c.tokens_q = {900};
    c.tokens_kv = {1300};
    run_both_dtypes(c, 1455);
  }
  {
    SCOPED_TRACE("2-D neighborhood with stride, grouped heads: 200 CTAs");
    c.heads_q = 8;
    c.heads_kv = 4;
    c.mask = neighborhood({nd(13), nd(9, 1, 2)});
    c.tokens_q = c.tokens_kv = {60, 53};
    run_both_dtypes(c, 1460);
  }
  {
    SCOPED_TRACE("3-D neighborhood with dilation (per-thread reductions), grouped heads");
    c.mask = neighborhood({nd(3), nd(5, 2), nd(7, 1, 1, true)});
    c.tokens_q = c.tokens_kv = {10, 22, 25};
    run_both_dtypes(c, 1465);
  }
  {
    SCOPED_TRACE("block mask per head: 240 CTAs");
    c.heads_q = c.heads_kv = 8;
    c.mask = block_sparse_mask(TensorView{}, 64, 64);
    c.mask_heads = 8;
    c.mask_density = 0.4;
    c.tokens_q = c.tokens_kv = {1800};
    run_both_dtypes(c, 1470);
  }
}

// --- KV-parallel splitting (fp32 partials in the workspace, summed in split order) ----------------

TEST_F(CudaFmhaBackward, KvSplitsOverDenseAndCausalVisitsSumToTheOraclesGradients) {
  Case c;
  c.tokens_q = {300};
  c.tokens_kv = {131};
  c.kv_splits = 3;
  run_both_dtypes(c, 1500);
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_q = {333};
  c.tokens_kv = {200};
  c.heads_q = 6;
  c.kv_splits = 4;
  run_both_dtypes(c, 1505);
}

// Splits beyond the visits (one visit per query head here): the splits without visits must write zero
// partials, not leave the workspace's garbage in the sum.
TEST_F(CudaFmhaBackward, KvSplitsWithoutVisitsContributeZeros) {
  Case c;
  c.tokens_q = {5};
  c.tokens_kv = {131};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.kv_splits = 7;
  c.use_workspace = true;  // filled with NaN bytes
  run_both_dtypes(c, 1510);
}

TEST_F(CudaFmhaBackward, KvSplitsOverNeighborhoodBoxesWithDilationStrideAndCausal) {
  Case c;
  c.tokens_q = c.tokens_kv = {19, 23};
  c.mask = neighborhood({nd(5, 2, 2), nd(7, 1, 3, true)});
  c.heads_q = 6;
  c.heads_kv = 1;
  c.kv_splits = 3;
  run_both_dtypes(c, 1520);
  c.tokens_q = c.tokens_kv = {6, 9, 11};
  c.mask = neighborhood({nd(3), nd(5, 1, 2), nd(7)});
  c.heads_q = c.heads_kv = 2;
  c.kv_splits = 2;
  run_both_dtypes(c, 1525);
}

TEST_F(CudaFmhaBackward, KvSplitsOverBlockAndElementMaskListsWithEmptyRows) {
  Case c;
  c.mask = block_sparse_mask(TensorView{}, 16, 32);
  c.mask_heads = 4;
  c.mask_batch = 2;
  c.tokens_q = {150};
  c.tokens_kv = {170};
  c.kv_splits = 3;
  run_both_dtypes(c, 1530);
  c.mask = element_sparse_mask(TensorView{});
  c.mask_heads = 1;
  c.mask_batch = 1;
  c.empty_rows_every = 5;
  c.kv_splits = 5;
  run_both_dtypes(c, 1535);
}

TEST_F(CudaFmhaBackward, KvSplitsWithValueHeadDimBelowTheCompiledWidthOnStridedViews) {
  Case c;
  c.head_dim = 128;
  c.head_dim_v = 64;
  c.tokens_q = {140};
  c.tokens_kv = {260};
  c.layout = Layout::padded_heads;
  c.kv_splits = 2;
  run_both_dtypes(c, 1540);
}

// The automatic choice splits multi-query attention over few key tiles (FmhaBackwardSplit tests the
// choice itself): the workspace query shows the partials, and the gradients match the oracle.
TEST_F(CudaFmhaBackward, AutomaticKvSplitsForMultiQueryAttentionOverFewKeyTiles) {
  Case c;
  c.batch = 1;
  c.tokens_q = c.tokens_kv = {1000};
  c.heads_q = 8;
  c.heads_kv = 1;
  c.kv_splits = 0;
  c.use_workspace = true;
  {
    c.dtype = DType::bf16;
    if (!compiled_for(c)) GTEST_SKIP() << "bf16 head dim 64 not compiled";
    TestTensor q = TestTensor::make(c.dtype, {1, 1000, 8, 64}, {0, 0, 0, 0});
    TestTensor k = TestTensor::make(c.dtype, {1, 1000, 1, 64}, {0, 0, 0, 0});
    TestTensor lse = TestTensor::make(DType::f32, {1, 1000, 8}, {0, 0, 0});
    AttentionBackward p;
    p.q = p.out = p.grad_out = p.grad_q = q.device;
    p.k = p.v = p.grad_k = p.grad_v = k.device;
    p.lse = lse.device;
    const RunOptions options{Backend::cuda, nullptr, 0};
    p.kv_splits = 1;
    const int64_t unsplit = attention_backward_workspace_size(p, options);
    p.kv_splits = 0;
    EXPECT_GT(attention_backward_workspace_size(p, options), unsplit)
        << "8 to 16 KV tiles leave the SMs of any GPU idle: the automatic choice splits (fp32 partials)";
  }
  run_both_dtypes(c, 1550);
}

TEST_F(CudaFmhaBackward, KvSplitsAreBitIdenticalAcrossRunsInBothModes) {
  Case c;
  c.dtype = DType::bf16;
  c.tokens_q = c.tokens_kv = {40, 37};
  c.heads_q = 4;
  c.heads_kv = 1;
  c.mask = neighborhood({nd(11), nd(9)});
  c.kv_splits = 3;
  if (!compiled_for(c)) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  for (bool deterministic : {true, false}) {
    SCOPED_TRACE(deterministic ? "deterministic mode" : "fast mode");
    c.deterministic = deterministic;
    const CaseResult first = run_case(c, 1560);
    const CaseResult second = run_case(c, 1560);
    if (deterministic) {
      EXPECT_TRUE(first.dq_bytes == second.dq_bytes) << "grad_q differs between two runs";
    }
    EXPECT_TRUE(first.dk_bytes == second.dk_bytes) << "grad_k differs between two runs";
    EXPECT_TRUE(first.dv_bytes == second.dv_bytes) << "grad_v differs between two runs";
  }
}

TEST_F(CudaFmhaBackward, SmallRunsOnTheCallersStreamWithTheCallersWorkspace) {
  Case c;
  c.use_stream = true;
  c.use_workspace = true;
  c.mask = element_sparse_mask(TensorView{});
  run_both_dtypes(c, 1410);
  c.mask = causal_mask();
  run_both_dtypes(c, 1415);
}

TEST_F(CudaFmhaBackward, WorkspaceSmallerThanTheSizeQueryIsRefused) {
  Case c;
  c.dtype = DType::bf16;
  if (!compiled_for(c)) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  TestTensor q = TestTensor::make(c.dtype, {1, 64, 2, 64}, {0, 0, 0, 0});
  TestTensor k = TestTensor::make(c.dtype, {1, 64, 2, 64}, {0, 0, 0, 0});
  TestTensor lse = TestTensor::make(DType::f32, {1, 64, 2}, {0, 0, 0});
  TestTensor dq = TestTensor::make(c.dtype, {1, 64, 2, 64}, {0, 0, 0, 0});
  AttentionBackward p;
  p.q = p.k = p.v = p.out = p.grad_out = q.device;
  p.lse = lse.device;
  p.grad_q = dq.device;
  p.grad_k = p.grad_v = k.device;
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic mode" : "fast mode");
    p.deterministic = deterministic;
    RunOptions options;
    options.backend = Backend::cuda;
    const int64_t needed = attention_backward_workspace_size(p, options);
    ASSERT_GT(needed, 0);
    DeviceBuffer small(static_cast<std::size_t>(needed));
    options.workspace = small.data();
    options.workspace_bytes = needed - 256;
    try {
      attention_backward(p, options);
      ADD_FAILURE() << "a workspace below attention_backward_workspace_size() was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("workspace_bytes"), std::string::npos) << e.what();
    }
  }
}

// The size query answers for the kernel the call would run on this device: the portable tier's fast mode
// adds the fp32 dQ accumulator to the deterministic mode's workspace; the Hopper tier accumulates in both
// modes and its deterministic mode adds the turn counters (4 bytes per (batch, head, Q tile of 64)) and the
// visitor bounds (8 bytes per Q tile).
TEST_F(CudaFmhaBackward, WorkspaceQueryAddsWhatTheModeOfTheDevicesKernelNeeds) {
  const DType dtype = DType::bf16;
  if (cuda::fmha::fmha_backward_compiled_width(dtype, 64, 64) == 0) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  const cuda::fmha::FmhaBackwardKernel* kernel = cuda::fmha::fmha_backward_default_kernel(
      dtype, 64, 64, cuda::fmha::FmhaBackwardPolicy::box, cuda::fmha::fmha_device(0));
  ASSERT_NE(kernel, nullptr) << "no backward kernel runs bf16 d64 on this device";
  const int64_t batch = 2, seq = 96, heads = 3, dim = 64;  // 4 * B * Sq * Hq * D is a multiple of 256
  TestTensor q = TestTensor::make(dtype, {batch, seq, heads, dim}, {0, 0, 0, 0});
  TestTensor lse = TestTensor::make(DType::f32, {batch, seq, heads}, {0, 0, 0});
  AttentionBackward p;
  p.q = p.k = p.v = p.out = p.grad_out = p.grad_q = p.grad_k = p.grad_v = q.device;
  p.lse = lse.device;
  const RunOptions options{Backend::cuda, nullptr, 0};
  p.deterministic = true;
  const int64_t deterministic_bytes = attention_backward_workspace_size(p, options);
  p.deterministic = false;
  const int64_t fast_bytes = attention_backward_workspace_size(p, options);
  if (kernel->config.architecture == 90) {
    const int64_t q_tiles = (seq + 63) / 64;
    EXPECT_EQ(deterministic_bytes - fast_bytes, round_up_256(4 * batch * heads * q_tiles) + round_up_256(8 * q_tiles))
        << "fast mode: " << fast_bytes << " bytes, deterministic: " << deterministic_bytes;
  } else {
    EXPECT_EQ(fast_bytes - deterministic_bytes, 4 * batch * seq * heads * dim)
        << "fast mode: " << fast_bytes << " bytes, deterministic: " << deterministic_bytes;
  }
}

TEST_F(CudaFmhaBackward, HeadDimAbove128IsRefusedNamingTheCompiledWidths) {
  TestTensor q = TestTensor::make(DType::bf16, {1, 16, 1, 256}, {0, 0, 0, 0});
  TestTensor lse = TestTensor::make(DType::f32, {1, 16, 1}, {0, 0, 0});
  AttentionBackward p;
  p.q = p.k = p.v = p.out = p.grad_out = p.grad_q = p.grad_k = p.grad_v = q.device;
  p.lse = lse.device;
  try {
    attention_backward(p, RunOptions{Backend::cuda, nullptr, 0});
    FAIL() << "head dim 256 was accepted by the CUDA backward";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("128"), std::string::npos) << e.what();
  }
}

// --- the registry (host only: runs without a GPU) ----------------------------------------------

// Whether this build compiles a Hopper backward entry of `dtype` at `width` with `policy`.
bool has_hopper_entry(DType dtype, int width, cuda::fmha::FmhaBackwardPolicy policy) {
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.architecture == 90 && k.config.dtype == dtype && k.config.head_dim == width &&
        k.config.policy == policy) {
      return true;
    }
  }
  return false;
}

TEST(FmhaBackwardRegistry, HoldsOneKernelPerDtypeWidthPolicyArchitectureAndKvTile) {
  const auto& kernels = cuda::fmha::fmha_backward_kernels();
  const auto portable =
      std::count_if(kernels.begin(), kernels.end(), [](const auto& k) { return k.config.architecture == 80; });
  EXPECT_EQ(portable, 8) << "f16/bf16 x widths 64/128 x box/list";
  const auto hopper_d32 = std::count_if(kernels.begin(), kernels.end(), [](const auto& k) {
    return k.config.architecture == 90 && k.config.head_dim == 32 && k.config.block_n == 128;
  });
  const auto hopper_64_keys = std::count_if(kernels.begin(), kernels.end(), [](const auto& k) {
    return k.config.architecture == 90 && k.config.block_n == 64;
  });
  EXPECT_TRUE(kernels.size() == 8u ||
              kernels.size() == 16u + static_cast<std::size_t>(hopper_d32) + static_cast<std::size_t>(hopper_64_keys))
      << "plus the same 8 of the Hopper tier with sm_90a, its D 32 entries and its entries of 64-key tiles";
  for (const auto& k : kernels) {
    // Several KV heads per CTA: the Hopper dK/dV kernels up to D 64 (Sm90BackwardTraits::kSeveralHeadsPerCta).
    EXPECT_EQ(k.config.several_heads_per_cta, k.config.architecture == 90 && k.config.head_dim <= 64)
        << cuda::fmha::fmha_backward_config_name(k.config);
  }
  for (const auto& k : kernels) {
    if (k.config.architecture != 90 || k.config.block_n != 64) continue;
    EXPECT_EQ(k.config.policy, cuda::fmha::FmhaBackwardPolicy::box) << cuda::fmha::fmha_backward_config_name(k.config);
    EXPECT_EQ(k.config.ctas_per_sm, 2) << cuda::fmha::fmha_backward_config_name(k.config);
  }
  std::vector<std::string> names;
  for (const auto& k : kernels) {
    EXPECT_TRUE(k.config.architecture == 80 || k.config.architecture == 90);
    EXPECT_EQ(k.config.architecture == 90,
              cuda::fmha::fmha_backward_config_name(k.config).find("_sm90") != std::string::npos);
    EXPECT_TRUE(k.config.head_dim == 64 || k.config.head_dim == 128 ||
                (k.config.head_dim == 32 && k.config.architecture == 90))
        << cuda::fmha::fmha_backward_config_name(k.config);
    EXPECT_GT(k.config.smem_bytes_dkdv, 0);
    EXPECT_GT(k.config.smem_bytes_dq, 0);
    names.push_back(cuda::fmha::fmha_backward_config_name(k.config));
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end()) << "two registry entries share a name";
}

// A width serves every mask: a dtype with a Hopper D 32 entry of one policy has the other too, so that no
// policy of a D 32 problem is left on a width without a kernel.
TEST(FmhaBackwardRegistry, HopperHeadDim32EntriesComeWithBothPolicies) {
  using cuda::fmha::FmhaBackwardPolicy;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    EXPECT_EQ(has_hopper_entry(dtype, 32, FmhaBackwardPolicy::box),
              has_hopper_entry(dtype, 32, FmhaBackwardPolicy::tile_list))
        << dtype_name(dtype);
  }
}

TEST(FmhaBackwardRegistry, SmallHeadDimsRunOnTheNarrowestWidthThatHoldsThem) {
  using cuda::fmha::fmha_backward_compiled_width;
  const int d32 = has_hopper_entry(DType::bf16, 32, cuda::fmha::FmhaBackwardPolicy::box) ? 32 : 64;
  EXPECT_EQ(fmha_backward_compiled_width(DType::bf16, 32, 32), d32);
  EXPECT_EQ(fmha_backward_compiled_width(DType::bf16, 24, 32), d32);
  EXPECT_EQ(fmha_backward_compiled_width(DType::bf16, 32, 40), 64);
  EXPECT_EQ(fmha_backward_compiled_width(DType::f16, 64, 48), 64);
  EXPECT_EQ(fmha_backward_compiled_width(DType::bf16, 72, 64), 128);
  EXPECT_EQ(fmha_backward_compiled_width(DType::f16, 128, 128), 128);
  EXPECT_EQ(fmha_backward_compiled_width(DType::bf16, 256, 256), 0) << "no backward width above 128";
  EXPECT_EQ(fmha_backward_compiled_width(DType::f32, 64, 64), 0) << "the CUDA backward runs fp16 and bf16 only";
}

// D 32 has Hopper kernels only: on 9.0 it runs on them, on other devices and with a positional bias (portable
// tier only) on the 64-wide portable kernels; both policies alike.
TEST(FmhaBackwardRegistry, HeadDim32RunsOnTheHopperD32KernelsOn90AndOnWidth64Elsewhere) {
  using cuda::fmha::FmhaBackwardPolicy;
  using cuda::fmha::FmhaDevice;
  bool any = false;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    if (!has_hopper_entry(dtype, 32, FmhaBackwardPolicy::box)) continue;
    any = true;
    for (const FmhaBackwardPolicy policy : {FmhaBackwardPolicy::box, FmhaBackwardPolicy::tile_list}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (policy == FmhaBackwardPolicy::box ? " box" : " list"));
      const FmhaDevice hopper{90, 227 * 1024};
      EXPECT_EQ(cuda::fmha::fmha_backward_width_on_device(dtype, 32, 32, policy, hopper), 32);
      EXPECT_EQ(cuda::fmha::fmha_backward_width_on_device(dtype, 24, 32, policy, hopper), 32);
      EXPECT_EQ(cuda::fmha::fmha_backward_width_on_device(dtype, 32, 40, policy, hopper), 64);
      const auto* on_hopper = cuda::fmha::fmha_backward_default_kernel(dtype, 32, 24, policy, hopper);
      ASSERT_NE(on_hopper, nullptr);
      EXPECT_EQ(on_hopper->config.head_dim, 32);
      EXPECT_EQ(on_hopper->config.architecture, 90);
      FmhaDevice with_bias = hopper;
      with_bias.portable_only = true;
      for (const FmhaDevice& device : {FmhaDevice{80, 163 * 1024}, FmhaDevice{100, 227 * 1024}, with_bias}) {
        SCOPED_TRACE("capability " + std::to_string(device.capability) +
                     (device.portable_only ? ", portable tier only" : ""));
        EXPECT_EQ(cuda::fmha::fmha_backward_width_on_device(dtype, 32, 32, policy, device), 64);
        const auto* other = cuda::fmha::fmha_backward_default_kernel(dtype, 32, 32, policy, device);
        ASSERT_NE(other, nullptr) << "a D 32 backward must still run there";
        EXPECT_EQ(other->config.head_dim, 64);
        EXPECT_EQ(other->config.architecture, 80);
      }
    }
  }
  if (!any) GTEST_SKIP() << "this build compiles no Hopper D 32 backward (sm_90a not in the arch list)";
}

TEST(FmhaBackwardRegistry, EveryPortableEntryFitsTwoCtasPerSmOnHopper) {
  constexpr int kHopperSmemPerSm = 228 * 1024;
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.architecture != 80) continue;  // the Hopper rows' traits check their own CTAs per SM
    const int per_cta = std::max(k.config.smem_bytes_dkdv, k.config.smem_bytes_dq) + 1024;  // + static and reserved
    EXPECT_LE(2 * per_cta, kHopperSmemPerSm) << cuda::fmha::fmha_backward_config_name(k.config);
  }
}

TEST(FmhaBackwardRegistry, HopperTierIsTheDefaultOnlyOnComputeCapability90) {
  using cuda::fmha::FmhaDevice;
  const auto* on_hopper = cuda::fmha::fmha_backward_default_kernel(
      DType::bf16, 128, 128, cuda::fmha::FmhaBackwardPolicy::box, FmhaDevice{90, 227 * 1024});
  ASSERT_NE(on_hopper, nullptr);
  if (on_hopper->config.architecture != 90) GTEST_SKIP() << "this build compiles no sm_90a code";
  for (const int capability : {80, 89, 100}) {
    const auto* other = cuda::fmha::fmha_backward_default_kernel(
        DType::bf16, 128, 128, cuda::fmha::FmhaBackwardPolicy::box, FmhaDevice{capability, 227 * 1024});
    ASSERT_NE(other, nullptr) << "capability " << capability;
    EXPECT_EQ(other->config.architecture, 80) << "capability " << capability;
    EXPECT_FALSE(cuda::fmha::fmha_backward_config_fits(on_hopper->config, FmhaDevice{capability, 227 * 1024}));
  }
  EXPECT_FALSE(cuda::fmha::fmha_backward_config_fits(on_hopper->config, FmhaDevice{90, 99 * 1024}))
      << "shared memory still bounds it";
}

// --- workspace sizes (host only: runs without a GPU) -------------------------------------------

// Exactly the launcher's workspace for a problem with these extents in one mode: the registry's entry for
// (bf16, `dim` wide, policy of `mask`, `architecture`) sized through make_backward_launch, as run_backward
// sizes it (-1: no such entry in this build); `params` receives the launch's params.
int64_t registry_workspace_bytes(int64_t batch, const std::vector<int64_t>& tokens, int64_t heads, int64_t dim,
                                 const AttentionMask& mask, bool deterministic, int architecture,
                                 cuda::fmha::FmhaBackwardParams* params = nullptr) {
  const Device gpu{DeviceType::cuda, 0};
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);  // never dereferenced: only sizes are computed
  std::vector<int64_t> extents = concat(batch, tokens, {heads, dim});
  std::vector<int64_t> lse_extents = concat(batch, tokens, {heads});
  const TensorView x = make_view(fake, DType::bf16, static_cast<int32_t>(extents.size()), extents.data(), gpu);
  AttentionBackward p;
  p.q = p.k = p.v = p.out = p.grad_out = p.grad_q = p.grad_k = p.grad_v = x;
  p.lse = make_view(fake, DType::f32, static_cast<int32_t>(lse_extents.size()), lse_extents.data(), gpu);
  p.mask = mask;
  p.deterministic = deterministic;
  const detail::AttentionShape shape = detail::describe_attention(p.q, p.k, p.v, p.scale);
  const auto policy = cuda::fmha::fmha_backward_policy_for(mask.kind);
  for (const auto& kernel : cuda::fmha::fmha_backward_kernels()) {
    if (kernel.config.dtype == DType::bf16 && kernel.config.head_dim == dim && kernel.config.policy == policy &&
        kernel.config.architecture == architecture) {
      // 0 multiprocessors: no automatic KV split (an explicit p.kv_splits still applies).
      const cuda::fmha::FmhaBackwardLaunch launch = cuda::fmha::make_backward_launch(p, shape, kernel.config, 0);
      if (params != nullptr) *params = launch.params;
      return kernel.workspace_bytes(launch);
    }
  }
  return -1;
}

// A launch asks for several KV heads per CTA only from the Hopper tier with a box mask in fast mode (forced
// count: the rule itself is FmhaSm90BackwardHeadsPerCta.HeadsPerCtaFollowTheWaveModel).
TEST(FmhaSm90BackwardHeadsPerCta, LaunchesAskForThemWhereTheKernelRunsThem) {
  const ForcedHeadsPerCta forced(4);
  const AttentionMask window = neighborhood({nd(7), nd(7)});
  cuda::fmha::FmhaBackwardParams params;
  if (registry_workspace_bytes(2, {24, 24}, 8, 64, window, false, 90, &params) < 0) {
    GTEST_SKIP() << "this build compiles no sm_90a code (no Hopper backward entries)";
  }
  for (const bool deterministic : {false, true}) {
    for (const int architecture : {90, 80}) {
      SCOPED_TRACE(std::string(deterministic ? "deterministic" : "fast") + ", sm" + std::to_string(architecture));
      ASSERT_GE(registry_workspace_bytes(2, {24, 24}, 8, 64, window, deterministic, architecture, &params), 0);
      EXPECT_EQ(params.heads_per_cta, !deterministic && architecture == 90 ? 4 : 1);
    }
  }
  AttentionMask blocks = block_sparse_mask(TensorView{}, 64, 64);  // tile lists: per-head visits
  ASSERT_GE(registry_workspace_bytes(2, {256}, 8, 64, blocks, false, 90, &params), 0);
  EXPECT_EQ(params.heads_per_cta, 1);
}

TEST(FmhaBackwardWorkspace, FastModeIsTheDefault) {
  EXPECT_FALSE(AttentionBackward{}.deterministic) << "AttentionBackward::deterministic defaults to fast mode";
}

struct WorkspaceShape {
  const char* name;
  int64_t batch;
  std::vector<int64_t> tokens;
  int64_t heads;
  int64_t dim;
  AttentionMask mask;
};

std::vector<WorkspaceShape> workspace_shapes() {
  const TensorView no_tensor{};
  return {
      {"dense", 2, {96}, 3, 64, AttentionMask{}},  // 4 * B * Sq * Hq * D = 147456, a multiple of 256
      {"causal d128", 1, {128}, 2, 128, causal_mask()},
      {"neighborhood 2-D with dilation", 2, {16, 24}, 1, 64, neighborhood({nd(5, 2), nd(7, 3, 1, true)})},
      {"element mask", 1, {64}, 4, 128, element_sparse_mask(no_tensor)},
  };
}

// The mask tensors' extents are what the list policy sizes its tile lists from (broadcast [1, 1, Sq, Sk]).
AttentionMask with_mask_tensor(const WorkspaceShape& s, std::vector<int64_t>& extents) {
  AttentionMask mask = s.mask;
  extents = {1, 1, product(s.tokens), product(s.tokens)};
  if (mask.kind == MaskKind::element) {
    mask.element_mask = make_view(reinterpret_cast<void*>(uintptr_t{1} << 20), DType::boolean, 4, extents.data(),
                                  Device{DeviceType::cuda, 0});
  }
  return mask;
}

TEST(FmhaBackwardWorkspace, PortableFastModeAddsExactlyTheFp32DqAccumulatorForEveryMaskKind) {
  for (const WorkspaceShape& s : workspace_shapes()) {
    SCOPED_TRACE(s.name);
    std::vector<int64_t> mask_extents;
    const AttentionMask mask = with_mask_tensor(s, mask_extents);
    const int64_t exact = registry_workspace_bytes(s.batch, s.tokens, s.heads, s.dim, mask, true, 80);
    cuda::fmha::FmhaBackwardParams params;
    const int64_t fast = registry_workspace_bytes(s.batch, s.tokens, s.heads, s.dim, mask, false, 80, &params);
    ASSERT_GT(exact, 0) << "no portable registry entry for bf16 d" << s.dim;
    const int64_t accumulator = 4 * s.batch * product(s.tokens) * s.heads * s.dim;
    // Small problems also count the finished dK/dV CTAs (the fused dQ convert): one word.
    const int64_t counter = cuda::fmha::fuses_dq_convert(params, 64, static_cast<int>(s.dim)) ? 256 : 0;
    EXPECT_EQ(fast - exact, round_up_256(accumulator) + counter) << "fast " << fast << " deterministic " << exact;
  }
}

// The Hopper tier accumulates dQ in both modes; ordering the additions (deterministic mode) adds a turn
// counter per (batch, query head, Q tile) and the ranks' table: tile lists 4 bytes per (mask slice, Q tile,
// KV tile), box policies 8 bytes per (dimension, dilation group, Q tile position).
TEST(FmhaBackwardWorkspace, HopperDeterministicModeAddsTurnCountersAndRankTablesForEveryMaskKind) {
  for (const WorkspaceShape& s : workspace_shapes()) {
    SCOPED_TRACE(s.name);
    std::vector<int64_t> mask_extents;
    const AttentionMask mask = with_mask_tensor(s, mask_extents);
    cuda::fmha::FmhaBackwardParams params;
    const int64_t exact = registry_workspace_bytes(s.batch, s.tokens, s.heads, s.dim, mask, true, 90, &params);
    const int64_t fast = registry_workspace_bytes(s.batch, s.tokens, s.heads, s.dim, mask, false, 90);
    if (exact < 0) GTEST_SKIP() << "this build compiles no sm_90a code (no Hopper backward entries)";
    EXPECT_TRUE(params.ordered_dq && params.accumulate_dq) << "the Hopper deterministic mode orders its dQ additions";
    int64_t table = 0;
    if (params.use_lists) {
      table = 4 * int64_t{params.list.q_tiles} * params.list.kv_tiles;  // one mask slice: broadcast mask
    } else {
      for (int d = 0; d < params.dims; ++d) table += 8 * int64_t{params.dilation[d]} * params.q_tiles[d];
    }
    const int64_t counters = 4 * s.batch * s.heads * params.total_q_tiles;
    EXPECT_EQ(exact - fast, round_up_256(counters) + round_up_256(table))
        << "fast " << fast << " deterministic " << exact;
  }
}

// --- timing (disabled by default) ---------------------------------------------------------------

struct TimingShape {
  std::string name;
  int64_t batch;
  std::vector<int64_t> tokens;
  int64_t heads;
  int64_t head_dim;
  AttentionMask mask;
};

double attended_pairs(const TimingShape& s) {
  const double seq = static_cast<double>(product(s.tokens));
  if (s.mask.kind == MaskKind::causal) return seq * (seq + 1) / 2;
  if (s.mask.kind != MaskKind::neighborhood) return seq * seq;
  double pairs = 1;
  for (std::size_t d = 0; d < s.tokens.size(); ++d) {
    const auto& n = s.mask.neighborhood[d];
    double sum = 0;
    for (int64_t x = 0; x < s.tokens[d]; ++x) {
      const auto w =
          detail::neighborhood_window_of_coordinate(x, s.tokens[d], n.kernel_size, n.dilation, n.stride, n.causal);
      sum += static_cast<double>(w.indices.end - w.indices.begin);
    }
    pairs *= sum;
  }
  return pairs;
}

void time_backward(const TimingShape& s, bool deterministic) {
  const DType dtype = DType::bf16;
  const std::vector<int64_t> pad(s.tokens.size() + 3, 0);
  TestTensor q = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor k = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor v = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor out = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor grad_out = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor dq = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor dk = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor dv = TestTensor::make(dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}), pad);
  TestTensor lse =
      TestTensor::make(DType::f32, concat(s.batch, s.tokens, {s.heads}), std::vector<int64_t>(s.tokens.size() + 2, 0));
  std::mt19937_64 rng(11);
  for (TestTensor* t : {&q, &k, &v, &grad_out}) {
    test::fill_random(t->buffer.view, rng, -1.0, 1.0);
    t->upload();
  }
  AttentionForward f;
  f.q = q.device;
  f.k = k.device;
  f.v = v.device;
  f.out = out.device;
  f.lse = lse.device;
  f.mask = s.mask;
  const RunOptions options{Backend::cuda, nullptr, 0};
  attention_forward(f, options);
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
  b.mask = s.mask;
  b.deterministic = deterministic;
  for (int i = 0; i < 3; ++i) attention_backward(b, options);
  expect_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    cudaEventRecord(start);
    attention_backward(b, options);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  expect_cuda(cudaGetLastError(), "timed runs");
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double flops =
      10.0 * static_cast<double>(s.batch * s.heads) * attended_pairs(s) * static_cast<double>(s.head_dim);
  std::printf("TIMING backward %-30s bf16 %-13s median %8.3f ms  min %8.3f ms  %7.1f TF/s\n", s.name.c_str(),
              deterministic ? "deterministic" : "fast", median, ms[0], flops / (median * 1e-3) / 1e12);
}

TEST_F(CudaFmhaBackward, DISABLED_TimingRepresentativeShapes) {
  Case c;
  c.dtype = DType::bf16;
  c.head_dim = c.head_dim_v = 128;
  if (!compiled_for(c)) GTEST_SKIP() << "bf16 d128 not compiled";
  for (bool deterministic : {false, true}) {
    time_backward({"dense-d128-s8k-b1-h16", 1, {8192}, 16, 128, AttentionMask{}}, deterministic);
    time_backward({"causal-d128-s8k-b1-h16", 1, {8192}, 16, 128, causal_mask()}, deterministic);
    time_backward({"na2d-d128-128x128-k31-b1-h8", 1, {128, 128}, 8, 128, neighborhood({nd(31), nd(31)})},
                  deterministic);
    time_backward({"na3d-d128-16x32x32-k7-b1-h8", 1, {16, 32, 32}, 8, 128, neighborhood({nd(7), nd(7), nd(7)})},
                  deterministic);
  }
}

#endif  // ATTNKIT_WITH_CUDA

}  // namespace
}  // namespace attnkit
