// Zero-size problems (an extent 0 in batch, tokens, heads or a head dim) are valid wherever the result is
// defined, and their calls write exactly what the definition fixes: outputs are poisoned with NaN first, and
// afterwards hold zeros (gradients, outputs of rows with no key), -inf (the LSE of rows with no key) or the
// defined values of the head_dim-0 / Dv-0 / T-0 / k-0 cases. A tensor with no elements may have a null data
// pointer (HostTensor::contiguous gives one). Also: the workspace query, the config query, the plan cache,
// the C ABI, and the messages of the rules that still refuse an extent 0 or a dtype.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "attnkit/attnkit.h"
#include "capi/c_api_convert.hpp"
#include "test_support.hpp"
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

constexpr uint64_t kPoisoned = 0;

// A packed host tensor of random values from `seed`, or of NaN everywhere for kPoisoned (an output: a test
// then sees which elements the op wrote). Null data when an extent is 0.
HostTensor host_tensor(DType dtype, const std::vector<int64_t>& extents, uint64_t seed) {
  HostTensor t = HostTensor::contiguous(dtype, extents);
  std::mt19937_64 rng(seed);
  if (seed == kPoisoned) {
    poison_nan(t.view);
  } else {
    fill_random(t.view, rng);
  }
  return t;
}

// Every element equals `value` (at least one element: the tests check outputs that must be written).
::testing::AssertionResult all_equal(const TensorView& view, double value) {
  const std::vector<double> values = to_doubles(view);
  if (values.empty()) return ::testing::AssertionFailure() << "the view has no elements";
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != value) return ::testing::AssertionFailure() << "element " << i << " is " << values[i];
  }
  return ::testing::AssertionSuccess();
}

// Attention tensors for one call: random inputs, poisoned out and lse.
struct AttentionCall {
  HostTensor q, k, v, out, lse;
  AttentionForward forward(const AttentionMask& mask = {}) const {
    AttentionForward p;
    std::tie(p.q, p.k, p.v, p.out, p.lse, p.mask) = std::tie(q.view, k.view, v.view, out.view, lse.view, mask);
    return p;
  }
};

AttentionCall attention_call(const std::vector<int64_t>& q_shape, const std::vector<int64_t>& k_shape,
                             int64_t head_dim_v, DType dtype = DType::f32) {
  std::vector<int64_t> v_shape = k_shape;
  v_shape.back() = head_dim_v;
  std::vector<int64_t> out_shape = q_shape;
  out_shape.back() = head_dim_v;
  const std::vector<int64_t> lse_shape(q_shape.begin(), q_shape.end() - 1);
  return {host_tensor(dtype, q_shape, 1), host_tensor(dtype, k_shape, 2), host_tensor(dtype, v_shape, 3),
          host_tensor(dtype, out_shape, kPoisoned), host_tensor(DType::f32, lse_shape, kPoisoned)};
}

// Gradients for the backward of `call`, poisoned, with a random grad_out.
struct AttentionGradients {
  HostTensor grad_out, grad_q, grad_k, grad_v;
  AttentionBackward backward(const AttentionForward& f) const {
    AttentionBackward p;
    std::tie(p.q, p.k, p.v, p.out, p.lse, p.mask) = std::tie(f.q, f.k, f.v, f.out, f.lse, f.mask);
    std::tie(p.grad_out, p.grad_q, p.grad_k, p.grad_v) = std::tie(grad_out.view, grad_q.view, grad_k.view, grad_v.view);
    return p;
  }
};

std::vector<int64_t> shape_of(const TensorView& view) {
  return std::vector<int64_t>(view.extents.begin(), view.extents.begin() + view.rank);
}

AttentionGradients attention_gradients(const AttentionCall& call) {
  const DType dtype = call.q.view.dtype;
  return {host_tensor(dtype, shape_of(call.out.view), 4), host_tensor(dtype, shape_of(call.q.view), kPoisoned),
          host_tensor(dtype, shape_of(call.k.view), kPoisoned), host_tensor(dtype, shape_of(call.v.view), kPoisoned)};
}

// Runs the forward of `call` with `mask`, then its backward into fresh gradients.
AttentionGradients forward_and_backward(const AttentionCall& call, const AttentionMask& mask = {}) {
  const AttentionForward f = call.forward(mask);
  attention_forward(f);
  AttentionGradients grads = attention_gradients(call);
  attention_backward(grads.backward(f));
  return grads;
}

// --- validation -------------------------------------------------------------------------------------

TEST(ValidateZeroSize, EveryAttentionExtentMayBeZero) {
  const std::vector<std::vector<int64_t>> q_shapes{{0, 6, 5, 4, 8}, {2, 0, 5, 4, 8}, {2, 6, 5, 0, 8}, {2, 6, 5, 4, 0}};
  for (const auto& shape : q_shapes) {
    auto p = valid_attention_forward();
    p.q = make_view(nullptr, DType::f32, static_cast<int32_t>(shape.size()), shape.data());
    auto out_shape = shape;
    out_shape.back() = 7;  // with head_dim 0 alone, out still has elements
    void* out_data = shape.back() == 0 ? placeholder_address() : nullptr;
    p.out = make_view(out_data, DType::f32, static_cast<int32_t>(out_shape.size()), out_shape.data());
    p.lse = {};
    if (shape[0] == 0) {
      p.k = view_of(DType::f32, {0, 6, 5, 2, 8});
      p.v = view_of(DType::f32, {0, 6, 5, 2, 7});
    }
    if (shape.back() == 0) p.k = view_of(DType::f32, {2, 6, 5, 2, 0});
    EXPECT_NO_THROW(detail::validate_attention_forward(p, {})) << p.q.shape_string();
  }
}

TEST(ValidateZeroSize, NullDataIsAllowedOnlyForATensorWithNoElements) {
  auto p = valid_attention_forward();
  p.v.data = nullptr;
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("v: data pointer is null"), HasSubstr("null only for a tensor with an extent 0")));
}

TEST(ValidateZeroSize, NegativeExtentsAreRejected) {
  auto p = valid_attention_forward();
  p.q.extents[1] = -1;
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("q: extent -1 in dim 1"), HasSubstr("allowed: every extent >= 0")));
}

TEST(ValidateZeroSize, ZeroKeyHeadsServeOnlyZeroQueryHeads) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 6, 5, 0, 8});
  p.v = view_of(DType::f32, {2, 6, 5, 0, 7});
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("k: heads 0"), HasSubstr("Hkv = 0 only with Hq = 0")));
  p.q = view_of(DType::f32, {2, 6, 5, 0, 8});
  p.out = view_of(DType::f32, {2, 6, 5, 0, 7});
  p.lse = view_of(DType::f32, {2, 6, 5, 0});
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

// A 0x5 token grid: q, k, v and out [1, 0, 5, 2, 8].
AttentionForward empty_grid_problem(const AttentionMask& mask) {
  AttentionForward p;
  p.q = view_of(DType::f32, {1, 0, 5, 2, 8});
  std::tie(p.k, p.v, p.out, p.mask) = std::tie(p.q, p.q, p.q, mask);
  return p;
}

TEST(ValidateZeroSize, NeighborhoodDimensionOfExtentZeroTakesAnyKernelSize) {
  EXPECT_NO_THROW(detail::validate_attention_forward(empty_grid_problem(neighborhood_mask({9, 3})), {}));
}

TEST(ValidateZeroSize, NeighborhoodRulesStillHoldInTheOtherDimensions) {
  AttentionForward p = empty_grid_problem(neighborhood_mask({3, 7}));
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("mask.neighborhood[1].kernel_size: 7"), HasSubstr("tokens[1] is 5"),
                    HasSubstr("allowed: kernel_size*dilation <= extent (an extent 0 has no tokens")));
  p.mask = neighborhood_mask({0, 3});
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              HasSubstr("mask.neighborhood[0].kernel_size: 0; allowed: kernel_size >= 1"));
}

TEST(ValidateZeroSize, GemmBatchOneBroadcastsToBatchZero) {
  GemmProblem p;
  p.a = view_of(DType::f32, {0, 7, 5});
  p.b = view_of(DType::f32, {1, 5, 6});
  p.c = view_of(DType::f32, {0, 7, 6});
  EXPECT_NO_THROW(detail::validate_gemm(p, {}));
  p.c = view_of(DType::f32, {1, 7, 6});
  EXPECT_THAT(error_message([&] { detail::validate_gemm(p, {}); }),
              AllOf(HasSubstr("c: batch 1"), HasSubstr("allowed: 0"), HasSubstr("or 0 when one batch is 0")));
}

TEST(ValidateZeroSize, OutputWithNoElementsMayHaveAnyStrides) {
  auto p = valid_attention_forward();
  p.q = view_of(DType::f32, {0, 6, 5, 4, 8});
  p.k = view_of(DType::f32, {0, 6, 5, 2, 8});
  p.v = view_of(DType::f32, {0, 6, 5, 2, 7});
  p.out = strided_view(DType::f32, {0, 6, 5, 4, 7}, {0, 0, 0, 0, 0});  // e.g. torch's expand() of a scalar
  p.lse = {};
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

TEST(ValidateZeroSize, FloatArgumentsListOnlyFloatDtypes) {
  auto attention = valid_attention_forward();
  attention.q.dtype = DType::boolean;
  auto retention = valid_retention_forward();
  retention.q.dtype = DType::boolean;
  auto gemm_problem = valid_gemm();
  gemm_problem.a.dtype = DType::boolean;
  const std::string allowed = "allowed: float32, float16, bfloat16, float64";
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(attention, {}); }),
              AllOf(HasSubstr("q: dtype bool; " + allowed), Not(HasSubstr("float64, bool"))));
  EXPECT_THAT(error_message([&] { detail::validate_retention_forward(retention, {}); }),
              AllOf(HasSubstr("q: dtype bool; " + allowed), Not(HasSubstr("float64, bool"))));
  EXPECT_THAT(error_message([&] { detail::validate_gemm(gemm_problem, {}); }),
              AllOf(HasSubstr("a: dtype bool; " + allowed), Not(HasSubstr("float64, bool"))));
}

// --- attention forward ------------------------------------------------------------------------------

TEST(ZeroSizeAttention, NoKeyGivesZeroOutputAndMinusInfLseForEveryMaskKind) {
  // q [2, 3x4 tokens, 2, 8]; k, v [2, 0 tokens, 2, 8 | 6]: every query row attends no key.
  HostTensor block_mask = HostTensor::contiguous(DType::boolean, {1, 2, 3, 0});
  HostTensor element_mask = HostTensor::contiguous(DType::boolean, {2, 1, 12, 0});
  const std::vector<AttentionMask> masks{
      AttentionMask{}, causal_mask(CausalAlignment::top_left), causal_mask(CausalAlignment::bottom_right),
      block_sparse_mask(block_mask.view, 4, 4), element_sparse_mask(element_mask.view)};
  for (const AttentionMask& mask : masks) {
    const AttentionCall call = attention_call({2, 3, 4, 2, 8}, {2, 0, 2, 8}, 6);
    attention_forward(call.forward(mask));
    EXPECT_TRUE(all_equal(call.out.view, 0.0)) << "mask kind " << static_cast<int>(mask.kind);
    EXPECT_TRUE(all_equal(call.lse.view, kMinusInf)) << "mask kind " << static_cast<int>(mask.kind);
  }
}

TEST(ZeroSizeAttention, NoKeyGivesZeroOutputInEveryDtype) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const AttentionCall call = attention_call({1, 5, 2, 8}, {1, 0, 2, 8}, 8, dtype);
    attention_forward(call.forward());
    EXPECT_TRUE(all_equal(call.out.view, 0.0)) << dtype_name(dtype);
    EXPECT_TRUE(all_equal(call.lse.view, kMinusInf)) << dtype_name(dtype);
  }
}

TEST(ZeroSizeAttention, StridedOutputOfRowsWithNoKeyIsWrittenExactly) {
  AttentionCall call = attention_call({1, 5, 3, 8}, {1, 0, 3, 8}, 4);
  call.out = HostTensor::padded(DType::f32, {1, 5, 3, 4}, 2);
  std::vector<float> buffer(call.out.storage.size() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  std::memcpy(call.out.storage.data(), buffer.data(), call.out.storage.size());
  attention_forward(call.forward());
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  std::memcpy(buffer.data(), call.out.storage.data(), call.out.storage.size());
  size_t zeros = 0;
  size_t nans = 0;
  for (float value : buffer) {
    zeros += value == 0.0f ? 1 : 0;
    nans += std::isnan(value) ? 1 : 0;
  }
  EXPECT_EQ(zeros, static_cast<size_t>(call.out.view.numel()));  // the padding around the view stays NaN
  EXPECT_EQ(zeros + nans, buffer.size());
}

TEST(ZeroSizeAttention, NoQueryRowIsValidForEveryMaskKindAndWritesNothing) {
  HostTensor block_mask = HostTensor::contiguous(DType::boolean, {1, 1, 0, 2});
  HostTensor element_mask = HostTensor::contiguous(DType::boolean, {1, 1, 0, 7});
  const std::vector<AttentionMask> masks{AttentionMask{}, causal_mask(CausalAlignment::bottom_right),
                                         block_sparse_mask(block_mask.view, 4, 4),
                                         element_sparse_mask(element_mask.view)};
  for (const AttentionMask& mask : masks) {
    const AttentionCall call = attention_call({1, 0, 2, 8}, {1, 7, 2, 8}, 8);
    EXPECT_NO_THROW(attention_forward(call.forward(mask))) << "mask kind " << static_cast<int>(mask.kind);
  }
  for (const auto& shape : std::vector<std::vector<int64_t>>{{0, 7, 2, 8}, {1, 7, 0, 8}}) {
    const AttentionCall call = attention_call(shape, {shape[0], 7, shape[2], 8}, 8);
    EXPECT_NO_THROW(attention_forward(call.forward(causal_mask())));
  }
}

TEST(ZeroSizeAttention, NeighborhoodWithATokenExtentZeroIsEmpty) {
  const AttentionCall call = attention_call({1, 0, 5, 2, 8}, {1, 0, 5, 2, 8}, 8);
  EXPECT_NO_THROW(attention_forward(call.forward(neighborhood_mask({9, 3}, {1, 1}, {1, 2}, {true, false}))));
}

TEST(ZeroSizeAttention, HeadDimZeroAttendsEveryAllowedKeyEqually) {
  // Scores are 0, so each row averages v over the keys its causal mask allows: query i sees keys [0, i + 2]
  // (bottom-right, Sq 3, Sk 5), and lse = log(count).
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const AttentionCall call = attention_call({1, 3, 1, 0}, {1, 5, 1, 0}, 2, dtype);
    attention_forward(call.forward(causal_mask(CausalAlignment::bottom_right)));
    const double tolerance = dtype == DType::f32 || dtype == DType::f64 ? 1e-6 : 2e-2;
    for (int64_t i = 0; i < 3; ++i) {
      const int64_t keys = i + 3;
      EXPECT_NEAR(element_at(call.lse.view, {0, i, 0}), std::log(static_cast<double>(keys)), 1e-5);
      for (int64_t c = 0; c < 2; ++c) {
        double mean = 0.0;
        for (int64_t j = 0; j < keys; ++j) mean += element_at(call.v.view, {0, j, 0, c}) / static_cast<double>(keys);
        EXPECT_NEAR(element_at(call.out.view, {0, i, 0, c}), mean, tolerance) << dtype_name(dtype);
      }
    }
  }
}

TEST(ZeroSizeAttention, ValueDimZeroStillGivesTheLse) {
  const AttentionCall empty_v = attention_call({1, 4, 2, 8}, {1, 6, 2, 8}, 0);
  const AttentionCall one_v = attention_call({1, 4, 2, 8}, {1, 6, 2, 8}, 1);  // same seeds: same q and k
  attention_forward(empty_v.forward(causal_mask()));
  attention_forward(one_v.forward(causal_mask()));
  EXPECT_LT(max_abs_difference(empty_v.lse.view, one_v.lse.view), 1e-6);
  EXPECT_TRUE(all_finite(empty_v.lse.view));
}

TEST(ZeroSizeAttention, WorkspaceIsZeroAndNoKernelIsConfigured) {
  const AttentionCall call = attention_call({1, 5, 2, 8}, {1, 0, 2, 8}, 8);
  const AttentionForward forward = call.forward();
  EXPECT_EQ(attention_forward_workspace_size(forward), 0);
  EXPECT_EQ(attention_forward_config(forward).name, "none_zero_size");
  const AttentionGradients grads = attention_gradients(call);
  EXPECT_EQ(attention_backward_workspace_size(grads.backward(forward)), 0);
}

TEST(ZeroSizeAttention, CachedZeroSizePlanDoesNotServeAnInvalidCall) {
  const AttentionCall call = attention_call({0, 5, 2, 8}, {0, 5, 2, 8}, 8);
  AttentionForward p = call.forward();
  attention_forward(p);  // made and cached
  p.q = {};              // absent: its null pointer no longer stands for an empty tensor
  EXPECT_THAT(error_message([&] { attention_forward(p); }), HasSubstr("q: data pointer is null"));
  p = call.forward();
  p.q.dtype = DType::f64;
  EXPECT_THAT(error_message([&] { attention_forward(p); }), HasSubstr("k: dtype float32 differs from q's float64"));
}

// --- attention backward -----------------------------------------------------------------------------

TEST(ZeroSizeAttention, BackwardWithNoKeyGivesZeroQueryGradients) {
  const AttentionGradients grads = forward_and_backward(attention_call({1, 5, 2, 4}, {1, 0, 2, 4}, 4), causal_mask());
  EXPECT_TRUE(all_equal(grads.grad_q.view, 0.0));
}

TEST(ZeroSizeAttention, BackwardWithNoQueryGivesZeroKeyAndValueGradients) {
  for (const auto& q_shape : std::vector<std::vector<int64_t>>{{1, 0, 2, 4}, {1, 5, 0, 4}}) {
    const AttentionGradients grads = forward_and_backward(attention_call(q_shape, {1, 6, 2, 4}, 3));
    EXPECT_TRUE(all_equal(grads.grad_k.view, 0.0));
    EXPECT_TRUE(all_equal(grads.grad_v.view, 0.0));
  }
}

TEST(ZeroSizeAttention, BackwardWithValueDimZeroGivesZeroGradients) {
  const AttentionGradients grads = forward_and_backward(attention_call({1, 5, 2, 4}, {1, 6, 2, 4}, 0));
  EXPECT_TRUE(all_equal(grads.grad_q.view, 0.0));
  EXPECT_TRUE(all_equal(grads.grad_k.view, 0.0));
}

TEST(ZeroSizeAttention, BackwardWithBatchZeroGivesZeroPositionalBiasGradient) {
  const AttentionCall call = attention_call({0, 6, 2, 8}, {0, 6, 2, 8}, 8);
  HostTensor rpb = host_tensor(DType::f32, {2, 5}, 5);
  HostTensor grad_rpb = host_tensor(DType::f32, {2, 5}, kPoisoned);
  AttentionMask mask = neighborhood_mask({3});
  mask.rpb = rpb.view;
  const AttentionForward f = call.forward(mask);
  attention_forward(f);
  const AttentionGradients grads = attention_gradients(call);
  AttentionBackward b = grads.backward(f);
  b.grad_rpb = grad_rpb.view;
  attention_backward(b);
  EXPECT_TRUE(all_equal(grad_rpb.view, 0.0));
}

TEST(ZeroSizeAttention, BackwardWithHeadDimZeroSpreadsGradOutOverTheAttendedKeys) {
  // Uniform P: grad_v[j] = sum over the rows i that see key j of grad_out[i] / count(i). Top-left causal,
  // Sq = Sk = 3: row i sees keys [0, i].
  const AttentionCall call = attention_call({1, 3, 1, 0}, {1, 3, 1, 0}, 2, DType::f64);
  const AttentionForward f = call.forward(causal_mask());
  attention_forward(f);
  const AttentionGradients grads = attention_gradients(call);
  attention_backward(grads.backward(f));
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t c = 0; c < 2; ++c) {
      double expected = 0.0;
      for (int64_t i = j; i < 3; ++i) expected += element_at(grads.grad_out.view, {0, i, 0, c}) / (i + 1.0);
      EXPECT_NEAR(element_at(grads.grad_v.view, {0, j, 0, c}), expected, 1e-6);  // P from the float32 lse
    }
  }
}

// --- retention --------------------------------------------------------------------------------------

struct RetentionCall {
  HostTensor q, k, v, out;
  RetentionForward forward(RetentionMode mode = RetentionMode::chunkwise) const {
    RetentionForward p;
    std::tie(p.q, p.k, p.v, p.out, p.mode) = std::tie(q.view, k.view, v.view, out.view, mode);
    return p;
  }
  RetentionBackward backward(const HostTensor& grad_out, const HostTensor& grad_q, const HostTensor& grad_k,
                             const HostTensor& grad_v, RetentionMode mode = RetentionMode::chunkwise) const {
    RetentionBackward p;
    std::tie(p.q, p.k, p.v, p.mode) = std::tie(q.view, k.view, v.view, mode);
    std::tie(p.grad_out, p.grad_q, p.grad_k, p.grad_v) = std::tie(grad_out.view, grad_q.view, grad_k.view, grad_v.view);
    return p;
  }
};

RetentionCall retention_call(int64_t batch, int64_t tokens, int64_t heads, int64_t dk, int64_t dv) {
  return {host_tensor(DType::f32, {batch, tokens, heads, dk}, 11),
          host_tensor(DType::f32, {batch, tokens, heads, dk}, 12),
          host_tensor(DType::f32, {batch, tokens, heads, dv}, 13),
          host_tensor(DType::f32, {batch, tokens, heads, dv}, kPoisoned)};
}

TEST(ZeroSizeRetention, KeyDimZeroGivesZeroOutputInEveryMode) {
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    const RetentionCall call = retention_call(2, 5, 3, 0, 4);
    HostTensor final_state = HostTensor::contiguous(DType::f32, {2, 3, 0, 4});
    RetentionForward p = call.forward(mode);
    p.final_state = final_state.view;
    retention_forward(p);
    EXPECT_TRUE(all_equal(call.out.view, 0.0)) << static_cast<int>(mode);
  }
}

TEST(ZeroSizeRetention, EmptyBatchOrHeadsIsValid) {
  for (const auto& [batch, heads] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {2, 0}}) {
    const RetentionCall call = retention_call(batch, 5, heads, 8, 4);
    EXPECT_NO_THROW(retention_forward(call.forward()));
  }
}

TEST(ZeroSizeRetention, NoTokenPassesTheInitialStateThrough) {
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    const RetentionCall call = retention_call(2, 0, 3, 4, 5);
    HostTensor initial = host_tensor(DType::f32, {2, 3, 4, 5}, 14);
    HostTensor final_state = host_tensor(DType::f32, {2, 3, 4, 5}, kPoisoned);
    RetentionForward p = call.forward(mode);
    p.initial_state = initial.view;
    p.final_state = final_state.view;
    retention_forward(p);
    EXPECT_EQ(max_abs_difference(final_state.view, initial.view), 0.0) << static_cast<int>(mode);
  }
}

TEST(ZeroSizeRetention, BackwardGivesZeroGradientsWhereTheOutputCannotDependOnAnInput) {
  // Dk = 0: out = 0 whatever v is, so grad_v = 0. Dv = 0: nothing depends on q or k.
  {
    const RetentionCall call = retention_call(2, 5, 3, 0, 4);
    HostTensor grad_out = host_tensor(DType::f32, {2, 5, 3, 4}, 15);
    HostTensor grad_q = HostTensor::contiguous(DType::f32, {2, 5, 3, 0});
    HostTensor grad_k = HostTensor::contiguous(DType::f32, {2, 5, 3, 0});
    HostTensor grad_v = host_tensor(DType::f32, {2, 5, 3, 4}, kPoisoned);
    retention_backward(call.backward(grad_out, grad_q, grad_k, grad_v));
    EXPECT_TRUE(all_equal(grad_v.view, 0.0));
  }
  {
    const RetentionCall call = retention_call(2, 5, 3, 4, 0);
    HostTensor grad_out = HostTensor::contiguous(DType::f32, {2, 5, 3, 0});
    HostTensor grad_q = host_tensor(DType::f32, {2, 5, 3, 4}, kPoisoned);
    HostTensor grad_k = host_tensor(DType::f32, {2, 5, 3, 4}, kPoisoned);
    HostTensor grad_v = HostTensor::contiguous(DType::f32, {2, 5, 3, 0});
    retention_backward(call.backward(grad_out, grad_q, grad_k, grad_v));
    EXPECT_TRUE(all_equal(grad_q.view, 0.0));
    EXPECT_TRUE(all_equal(grad_k.view, 0.0));
  }
}

TEST(ZeroSizeRetention, BackwardWithNoTokenPassesTheStateGradientThrough) {
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    const RetentionCall call = retention_call(2, 0, 3, 4, 5);
    HostTensor empty = HostTensor::contiguous(DType::f32, {2, 0, 3, 4});
    HostTensor empty_v = HostTensor::contiguous(DType::f32, {2, 0, 3, 5});
    HostTensor initial = host_tensor(DType::f32, {2, 3, 4, 5}, 16);
    HostTensor grad_final = host_tensor(DType::f32, {2, 3, 4, 5}, 17);
    HostTensor grad_initial = host_tensor(DType::f32, {2, 3, 4, 5}, kPoisoned);
    RetentionBackward p = call.backward(empty_v, empty, empty, empty_v, mode);
    p.initial_state = initial.view;
    p.grad_final_state = grad_final.view;
    p.grad_initial_state = grad_initial.view;
    retention_backward(p);
    EXPECT_EQ(max_abs_difference(grad_initial.view, grad_final.view), 0.0) << static_cast<int>(mode);
  }
}

// --- gemm -------------------------------------------------------------------------------------------

TEST(ZeroSizeGemm, EmptyResultIsValid) {
  for (const auto& [m, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {4, 0}}) {
    GemmProblem p;
    HostTensor a = host_tensor(DType::f32, {m, 3}, 21);
    HostTensor b = host_tensor(DType::f32, {3, n}, 22);
    HostTensor c = HostTensor::contiguous(DType::f32, {m, n});
    p.a = a.view;
    p.b = b.view;
    p.c = c.view;
    EXPECT_NO_THROW(gemm(p));
  }
}

TEST(ZeroSizeGemm, InnerDimZeroGivesBetaTimesC) {
  HostTensor a = HostTensor::contiguous(DType::f32, {4, 0});
  HostTensor b = HostTensor::contiguous(DType::f32, {0, 5});
  HostTensor c = host_tensor(DType::f32, {4, 5}, kPoisoned);
  GemmProblem p;
  p.a = a.view;
  p.b = b.view;
  p.c = c.view;
  gemm(p);  // beta 0: C is not read, so its NaNs become 0
  EXPECT_TRUE(all_equal(c.view, 0.0));
  fill_value(c.view, 3.0);
  p.beta = 0.5;
  gemm(p);
  EXPECT_TRUE(all_equal(c.view, 1.5));
}

TEST(ZeroSizeGemm, BatchZeroWithABroadcastOperandIsValid) {
  HostTensor a = HostTensor::contiguous(DType::f32, {0, 4, 3});
  HostTensor b = host_tensor(DType::f32, {1, 3, 5}, 23);
  HostTensor c = HostTensor::contiguous(DType::f32, {0, 4, 5});
  GemmProblem p;
  p.a = a.view;
  p.b = b.view;
  p.c = c.view;
  EXPECT_NO_THROW(gemm(p));
}

// --- C ABI ------------------------------------------------------------------------------------------

// The C ABI reads a NULL data pointer as an absent tensor, so C callers give empty tensors an address.
attnkit_tensor c_tensor(const TensorView& view) {
  attnkit_tensor t = capi::to_c_tensor(view);
  if (t.data == nullptr) t.data = placeholder_address();
  return t;
}

attnkit_attention_forward_args c_forward_args(const AttentionCall& call) {
  attnkit_attention_forward_args args;
  attnkit_attention_forward_args_init(&args);
  std::tie(args.q, args.k, args.v, args.out, args.lse) =
      std::make_tuple(c_tensor(call.q.view), c_tensor(call.k.view), c_tensor(call.v.view), c_tensor(call.out.view),
                      c_tensor(call.lse.view));
  return args;
}

TEST(ZeroSizeCAbi, AttentionForwardWithNoKeyWritesZerosAndMinusInf) {
  const AttentionCall call = attention_call({1, 5, 2, 8}, {1, 0, 2, 8}, 8);
  const attnkit_attention_forward_args args = c_forward_args(call);
  int64_t bytes = -1;
  ASSERT_EQ(attnkit_attention_forward_workspace_size(&args, nullptr, &bytes), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(bytes, 0);
  ASSERT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  EXPECT_TRUE(all_equal(call.lse.view, kMinusInf));
}

TEST(ZeroSizeCAbi, AttentionPlanRunsAZeroSizeCall) {
  const AttentionCall call = attention_call({1, 5, 2, 8}, {1, 0, 2, 8}, 8);
  const attnkit_attention_forward_args args = c_forward_args(call);
  attnkit_plan* plan = nullptr;
  ASSERT_EQ(attnkit_attention_forward_plan(&args, nullptr, 0, &plan), ATTNKIT_OK) << attnkit_last_error();
  int64_t bytes = -1;
  EXPECT_EQ(attnkit_plan_workspace_size(plan, &bytes), ATTNKIT_OK);
  EXPECT_EQ(bytes, 0);
  void* data[8] = {args.q.data, args.k.data, args.v.data, args.out.data, args.lse.data, nullptr, nullptr, nullptr};
  EXPECT_EQ(attnkit_plan_run(plan, data, 8, nullptr, nullptr, 0), ATTNKIT_OK) << attnkit_last_error();
  attnkit_plan_destroy(plan);
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  EXPECT_TRUE(all_equal(call.lse.view, kMinusInf));
}

TEST(ZeroSizeCAbi, RetentionAndGemmAcceptZeroSizeProblems) {
  const RetentionCall call = retention_call(2, 5, 3, 0, 4);
  attnkit_retention_forward_args retention;
  attnkit_retention_forward_args_init(&retention);
  std::tie(retention.q, retention.k, retention.v, retention.out) =
      std::make_tuple(c_tensor(call.q.view), c_tensor(call.k.view), c_tensor(call.v.view), c_tensor(call.out.view));
  ASSERT_EQ(attnkit_retention_forward(&retention, nullptr), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));

  HostTensor a = HostTensor::contiguous(DType::f32, {0, 4, 3});
  HostTensor b = host_tensor(DType::f32, {1, 3, 5}, 24);
  HostTensor c = HostTensor::contiguous(DType::f32, {0, 4, 5});
  attnkit_gemm_args gemm_args;
  attnkit_gemm_args_init(&gemm_args);
  std::tie(gemm_args.a, gemm_args.b, gemm_args.c) =
      std::make_tuple(c_tensor(a.view), c_tensor(b.view), c_tensor(c.view));
  EXPECT_EQ(attnkit_gemm(&gemm_args, nullptr), ATTNKIT_OK) << attnkit_last_error();
}

}  // namespace
}  // namespace attnkit::test
