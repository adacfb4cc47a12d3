// The CPU backend's attention backward: against the brute-force backward in float64, and against
// central finite differences of the scalar loss L = sum(O * W) (W = grad_out), which checks the
// gradients against the forward itself rather than against a second implementation of the same
// formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

constexpr double kFloat64Tolerance = 1e-12;
// The backward reads LSE from the forward, stored in float, so its P carries a relative error of
// about |lse| * 2^-24 against the exact softmax the finite differences see.
constexpr double kFiniteDifferenceTolerance = 1e-5;

void expect_backward_matches_reference(const AttentionCase& spec) {
  AttentionTensors t(spec);
  t.run_forward();
  t.run_backward();
  t.run_reference_backward();
  EXPECT_TRUE(all_finite(t.grad_q.view)) << "grad_q not fully written, or NaN";
  EXPECT_TRUE(all_finite(t.grad_k.view)) << "grad_k not fully written, or NaN";
  EXPECT_TRUE(all_finite(t.grad_v.view)) << "grad_v not fully written, or NaN";
  EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), kFloat64Tolerance);
  EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), kFloat64Tolerance);
  EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), kFloat64Tolerance);
}

double relative_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  double error = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    error += (a[i] - ref[i]) * (a[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(error / norm);
}

double loss(AttentionTensors& t) {
  t.run_forward(1);  // tiny problems: one thread avoids wake-up latency on a busy machine
  const std::vector<double> out = to_doubles(t.out.view);
  const std::vector<double> weight = to_doubles(t.grad_out.view);
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += out[i] * weight[i];
  return sum;
}

// dL/dx for every element of `input`, by central differences of the library's forward.
std::vector<double> finite_difference_gradient(AttentionTensors& t, const TensorView& input) {
  constexpr double kStep = 1e-5;
  std::vector<double> gradient;
  for_each_offset(input, [&](int64_t offset) {
    double* x = static_cast<double*>(input.data) + offset;
    const double saved = *x;
    *x = saved + kStep;
    const double above = loss(t);
    *x = saved - kStep;
    const double below = loss(t);
    *x = saved;
    gradient.push_back((above - below) / (2 * kStep));
  });
  return gradient;
}

void expect_backward_matches_finite_differences(const AttentionCase& spec) {
  ASSERT_EQ(spec.dtype, DType::f64);
  AttentionTensors t(spec);
  const std::vector<double> dq = finite_difference_gradient(t, t.q.view);
  const std::vector<double> dk = finite_difference_gradient(t, t.k.view);
  const std::vector<double> dv = finite_difference_gradient(t, t.v.view);
  t.run_forward();
  t.run_backward();
  EXPECT_LE(relative_l2(to_doubles(t.grad_q.view), dq), kFiniteDifferenceTolerance);
  EXPECT_LE(relative_l2(to_doubles(t.grad_k.view), dk), kFiniteDifferenceTolerance);
  EXPECT_LE(relative_l2(to_doubles(t.grad_v.view), dv), kFiniteDifferenceTolerance);
}

AttentionCase small_case(std::vector<int64_t> tokens, AttentionMask mask = {}) {
  AttentionCase c;
  c.batch = 1;
  c.tokens = std::move(tokens);
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 4;
  c.mask = mask;
  return c;
}

TEST(CpuAttentionBackward, DenseMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {13};
  c.head_dim = 16;
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, CausalBottomRightWithEmptyRowsMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {14};
  c.tokens_kv = {9};
  c.mask = causal_mask(CausalAlignment::bottom_right);
  expect_backward_matches_reference(c);
  c.tokens = {9};
  c.tokens_kv = {14};
  c.mask = causal_mask(CausalAlignment::top_left);
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, GroupedQueryHeadsSumKeyGradientsOverTheGroup) {
  AttentionCase c;
  c.tokens = {11};
  c.heads_q = 6;
  c.heads_kv = 2;
  c.mask = causal_mask();
  expect_backward_matches_reference(c);
  c.heads_q = 3;
  c.heads_kv = 1;
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, ValueHeadDimDifferentFromQueryHeadDimMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {10};
  c.head_dim = 12;
  c.head_dim_v = 5;
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, NeighborhoodMatchesBruteForce2D) {
  AttentionCase c;
  c.tokens = {10, 11};
  c.mask = neighborhood_mask({3, 4}, {3, 2}, {2, 1}, {false, true});
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, NeighborhoodMatchesBruteForce3D) {
  AttentionCase c;
  c.tokens = {5, 6, 7};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.mask = neighborhood_mask({3, 2, 5}, {1, 2, 1}, {1, 1, 2}, {false, false, true});
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, BlockMaskMatchesBruteForce) {
  std::mt19937_64 rng(11);
  HostTensor blocks = HostTensor::contiguous(DType::boolean, {2, 1, 5, 5});
  fill_random_bool(blocks.view, rng, 0.5);
  AttentionCase c;
  c.tokens = {19};
  c.tokens_kv = {23};
  c.mask = block_sparse_mask(blocks.view, 4, 5);
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, StridedViewsMatchBruteForce) {
  AttentionCase c;
  c.tokens = {6, 7};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 10;
  c.strided = true;
  c.mask = neighborhood_mask({3, 5});
  expect_backward_matches_reference(c);
}

TEST(CpuAttentionBackward, FullyMaskedRowsAndUnvisitedKeysGetZeroGradients) {
  // Query 3 attends nothing; key 5 is attended by nobody.
  std::mt19937_64 rng(12);
  HostTensor mask = HostTensor::contiguous(DType::boolean, {1, 1, 8, 8});
  fill_random_bool(mask.view, rng, 0.6);
  for (int64_t j = 0; j < 8; ++j) set_element(mask.view, {0, 0, 3, j}, 0.0);
  for (int64_t i = 0; i < 8; ++i) set_element(mask.view, {0, 0, i, 5}, 0.0);
  AttentionCase c;
  c.tokens = {8};
  c.mask = element_sparse_mask(mask.view);
  expect_backward_matches_reference(c);
  AttentionTensors t(c);
  t.run_forward();
  t.run_backward();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      for (int64_t x = 0; x < c.head_dim; ++x) {
        EXPECT_EQ(element_at(t.grad_q.view, {b, 3, h, x}), 0.0);
        EXPECT_EQ(element_at(t.grad_k.view, {b, 5, h, x}), 0.0);
        EXPECT_EQ(element_at(t.grad_v.view, {b, 5, h, x}), 0.0);
      }
    }
  }
}

TEST(CpuAttentionBackward, DenseMatchesFiniteDifferences) {
  expect_backward_matches_finite_differences(small_case({6}));
}

TEST(CpuAttentionBackward, CausalMatchesFiniteDifferences) {
  AttentionCase c = small_case({5}, causal_mask(CausalAlignment::bottom_right));
  c.tokens_kv = {7};
  expect_backward_matches_finite_differences(c);
}

TEST(CpuAttentionBackward, GroupedQueryHeadsMatchFiniteDifferences) {
  AttentionCase c = small_case({6}, causal_mask());
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim_v = 3;
  expect_backward_matches_finite_differences(c);
}

TEST(CpuAttentionBackward, DilatedNeighborhood2DMatchesFiniteDifferences) {
  AttentionCase c = small_case({5, 6}, neighborhood_mask({2, 3}, {2, 2}));
  c.heads_kv = 1;
  expect_backward_matches_finite_differences(c);
}

TEST(CpuAttentionBackward, BlockMaskMatchesFiniteDifferences) {
  std::mt19937_64 rng(13);
  HostTensor blocks = HostTensor::contiguous(DType::boolean, {1, 2, 3, 3});
  fill_random_bool(blocks.view, rng, 0.7);
  expect_backward_matches_finite_differences(small_case({7}, block_sparse_mask(blocks.view, 3, 3)));
}

}  // namespace
}  // namespace attnkit::test
