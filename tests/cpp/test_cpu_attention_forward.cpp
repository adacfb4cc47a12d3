// The CPU backend's attention forward against the brute-force reference, in float64, for every
// mask kind and layout feature (DESIGN §3). Outputs are poisoned with NaN before each run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

constexpr double kFloat64Tolerance = 1e-12;
// LSE is stored in float by both; they may differ in the last bit.
constexpr double kLseTolerance = 1e-7;

void expect_forward_matches_reference(const AttentionCase& spec) {
  AttentionTensors t(spec);
  t.run_forward();
  t.run_reference_forward();
  EXPECT_TRUE(all_finite(t.out.view)) << "output not fully written, or NaN";
  EXPECT_FALSE(any_nan(t.lse.view)) << "LSE not fully written, or NaN";
  EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), kFloat64Tolerance);
  EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), kLseTolerance);
}

AttentionCase neighborhood_case(std::vector<int64_t> tokens, AttentionMask mask) {
  AttentionCase c;
  c.tokens = std::move(tokens);
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 16;
  c.mask = mask;
  return c;
}

TEST(CpuAttentionForward, DenseMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {13};
  c.heads_q = c.heads_kv = 3;
  c.head_dim = 16;
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, CausalTopLeftMatchesBruteForceWithFewerQueriesThanKeys) {
  AttentionCase c;
  c.tokens = {9};
  c.tokens_kv = {14};
  c.mask = causal_mask(CausalAlignment::top_left);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, CausalTopLeftMatchesBruteForceWithMoreQueriesThanKeys) {
  AttentionCase c;
  c.tokens = {14};
  c.tokens_kv = {9};
  c.mask = causal_mask(CausalAlignment::top_left);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, CausalBottomRightMatchesBruteForceWithFewerQueriesThanKeys) {
  AttentionCase c;
  c.tokens = {9};
  c.tokens_kv = {14};
  c.mask = causal_mask(CausalAlignment::bottom_right);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, CausalBottomRightLeavesLeadingQueriesWithoutKeys) {
  // Sq=14, Sk=9: query i sees keys j <= i - 5, so queries 0..4 see none.
  AttentionCase c;
  c.tokens = {14};
  c.tokens_kv = {9};
  c.mask = causal_mask(CausalAlignment::bottom_right);
  expect_forward_matches_reference(c);
  AttentionTensors t(c);
  t.run_forward();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t h = 0; h < c.heads_q; ++h) {
        EXPECT_EQ(element_at(t.lse.view, {b, i, h}), -std::numeric_limits<double>::infinity());
        for (int64_t x = 0; x < c.head_dim; ++x) EXPECT_EQ(element_at(t.out.view, {b, i, h, x}), 0.0);
      }
    }
  }
}

TEST(CpuAttentionForward, GroupedQueryHeadsMatchBruteForce) {
  AttentionCase c;
  c.tokens = {11};
  c.heads_q = 6;
  c.heads_kv = 2;
  c.mask = causal_mask();
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, MultiQueryMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {4, 5};
  c.heads_q = 4;
  c.heads_kv = 1;
  c.mask = neighborhood_mask({3, 3});
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, ValueHeadDimDifferentFromQueryHeadDimMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {10};
  c.head_dim = 16;
  c.head_dim_v = 5;
  expect_forward_matches_reference(c);
  c.head_dim = 6;
  c.head_dim_v = 24;
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, CustomScaleMatchesBruteForce) {
  AttentionCase c;
  c.tokens = {12};
  c.scale = 0.37;
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, NeighborhoodMatchesBruteForce1D) {
  expect_forward_matches_reference(neighborhood_case({17}, neighborhood_mask({5})));
}

TEST(CpuAttentionForward, NeighborhoodMatchesBruteForce2D) {
  expect_forward_matches_reference(neighborhood_case({9, 11}, neighborhood_mask({3, 5})));
}

TEST(CpuAttentionForward, NeighborhoodMatchesBruteForce3D) {
  expect_forward_matches_reference(neighborhood_case({5, 7, 6}, neighborhood_mask({3, 3, 5})));
}

TEST(CpuAttentionForward, NeighborhoodEvenKernelMatchesBruteForce) {
  expect_forward_matches_reference(neighborhood_case({9, 10}, neighborhood_mask({4, 6})));
}

TEST(CpuAttentionForward, NeighborhoodDilationWithExtentNotDivisibleMatchesBruteForce) {
  expect_forward_matches_reference(neighborhood_case({17}, neighborhood_mask({3}, {4})));
  expect_forward_matches_reference(neighborhood_case({10, 11}, neighborhood_mask({3, 2}, {3, 4})));
}

TEST(CpuAttentionForward, NeighborhoodStrideMatchesBruteForce) {
  expect_forward_matches_reference(neighborhood_case({11, 13}, neighborhood_mask({5, 7}, {}, {2, 3})));
}

TEST(CpuAttentionForward, NeighborhoodPerDimensionCausalMatchesBruteForce) {
  expect_forward_matches_reference(neighborhood_case({9, 8}, neighborhood_mask({3, 5}, {}, {}, {true, false})));
  expect_forward_matches_reference(
      neighborhood_case({5, 6, 7}, neighborhood_mask({2, 3, 4}, {}, {}, {true, true, true})));
}

TEST(CpuAttentionForward, NeighborhoodMixedSettingsPerDimensionMatchBruteForce) {
  expect_forward_matches_reference(
      neighborhood_case({7, 9, 8}, neighborhood_mask({3, 4, 5}, {2, 1, 1}, {1, 2, 3}, {false, true, false})));
  expect_forward_matches_reference(
      neighborhood_case({13, 11}, neighborhood_mask({4, 3}, {3, 2}, {3, 2}, {true, false})));
}

TEST(CpuAttentionForward, NeighborhoodWithFullKernelEqualsDenseExactly) {
  AttentionCase dense = neighborhood_case({6, 7}, AttentionMask{});
  AttentionTensors expected(dense);
  expected.run_forward();
  AttentionCase full = dense;
  full.mask = neighborhood_mask({6, 7});
  AttentionTensors t(full);
  t.run_forward();
  EXPECT_EQ(max_abs_difference(t.out.view, expected.out.view), 0.0);
  EXPECT_EQ(max_abs_difference(t.lse.view, expected.lse.view), 0.0);
}

TEST(CpuAttentionForward, CausalNeighborhoodWithFullKernelEqualsCausalExactly) {
  AttentionCase causal = neighborhood_case({15}, causal_mask());
  AttentionTensors expected(causal);
  expected.run_forward();
  AttentionCase full = causal;
  full.mask = neighborhood_mask({15}, {}, {}, {true});
  AttentionTensors t(full);
  t.run_forward();
  EXPECT_EQ(max_abs_difference(t.out.view, expected.out.view), 0.0);
  EXPECT_EQ(max_abs_difference(t.lse.view, expected.lse.view), 0.0);
}

TEST(CpuAttentionForward, BlockMaskBroadcastOverBatchMatchesBruteForce) {
  // Sq=19, Sk=23 with 4x5 blocks: 5x5 blocks, the last ones partial.
  std::mt19937_64 rng(3);
  HostTensor blocks = HostTensor::contiguous(DType::boolean, {1, 2, 5, 5});
  fill_random_bool(blocks.view, rng, 0.5);
  AttentionCase c;
  c.tokens = {19};
  c.tokens_kv = {23};
  c.mask = block_sparse_mask(blocks.view, 4, 5);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, BlockMaskBroadcastOverHeadsWithStridedMaskMatchesBruteForce) {
  // Sq = 15 with bq = 6 and Sk = 20 with bk = 7: 3 x 3 blocks, the mask a view into a padded buffer.
  std::mt19937_64 rng(4);
  HostTensor blocks = HostTensor::strided(DType::boolean, {2, 1, 3, 3}, {1, 0, 2, 3});
  fill_random_bool(blocks.view, rng, 0.6);
  AttentionCase c;
  c.tokens = {3, 5};
  c.tokens_kv = {4, 5};
  c.mask = block_sparse_mask(blocks.view, 6, 7);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, ElementMaskMatchesBruteForce) {
  std::mt19937_64 rng(5);
  HostTensor mask = HostTensor::contiguous(DType::boolean, {2, 2, 11, 13});
  fill_random_bool(mask.view, rng, 0.4);
  AttentionCase c;
  c.tokens = {11};
  c.tokens_kv = {13};
  c.mask = element_sparse_mask(mask.view);
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, FullyMaskedRowsGiveZeroOutputAndNegativeInfinityLse) {
  std::mt19937_64 rng(6);
  HostTensor mask = HostTensor::contiguous(DType::boolean, {1, 2, 9, 9});
  fill_random_bool(mask.view, rng, 0.5);
  for (int64_t j = 0; j < 9; ++j) {
    set_element(mask.view, {0, 0, 2, j}, 0.0);  // head 0, query 2
    set_element(mask.view, {0, 1, 7, j}, 0.0);  // head 1, query 7
  }
  AttentionCase c;
  c.tokens = {9};
  c.mask = element_sparse_mask(mask.view);
  expect_forward_matches_reference(c);
  AttentionTensors t(c);
  t.run_forward();
  for (int64_t b = 0; b < c.batch; ++b) {
    EXPECT_EQ(element_at(t.lse.view, {b, 2, 0}), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(element_at(t.lse.view, {b, 7, 1}), -std::numeric_limits<double>::infinity());
    for (int64_t x = 0; x < c.head_dim; ++x) {
      EXPECT_EQ(element_at(t.out.view, {b, 2, 0, x}), 0.0);
      EXPECT_EQ(element_at(t.out.view, {b, 7, 1, x}), 0.0);
    }
  }
  EXPECT_TRUE(all_finite(t.out.view));
}

TEST(CpuAttentionForward, StridedViewsMatchBruteForce) {
  AttentionCase c;
  c.tokens = {7, 6};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 12;
  c.head_dim_v = 10;
  c.strided = true;
  expect_forward_matches_reference(c);
  c.mask = neighborhood_mask({3, 4}, {2, 1});
  expect_forward_matches_reference(c);
}

TEST(CpuAttentionForward, LseIsOptional) {
  AttentionCase c;
  c.tokens = {10};
  c.mask = causal_mask();
  AttentionTensors t(c);
  t.run_reference_forward();
  AttentionForward p = t.forward_problem();
  p.lse = TensorView{};
  RunOptions options;
  options.backend = Backend::cpu;
  attention_forward(p, options);
  EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), kFloat64Tolerance);
}

}  // namespace
}  // namespace attnkit::test
