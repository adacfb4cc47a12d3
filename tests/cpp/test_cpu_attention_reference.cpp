// The brute-force reference's explicit masks, checked on small cases worked out by hand from
// DESIGN §3 (the backend tests trust the reference, so the reference is tested on its own).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "cpu/attention_reference.hpp"
#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

using Matrix = std::vector<std::vector<int>>;

Matrix explicit_mask(const AttentionCase& spec, int64_t b = 0, int64_t h = 0) {
  AttentionTensors t(spec);
  const detail::AttentionShape shape = t.shape();
  const std::vector<uint8_t> flat = cpu::reference::explicit_attention_mask(spec.mask, shape, b, h);
  Matrix m(static_cast<size_t>(shape.seq_q), std::vector<int>(static_cast<size_t>(shape.seq_k)));
  for (int64_t i = 0; i < shape.seq_q; ++i) {
    for (int64_t j = 0; j < shape.seq_k; ++j) m[i][j] = flat[i * shape.seq_k + j];
  }
  return m;
}

TEST(CpuAttentionReference, CausalAlignmentsKeepTheirDiagonal) {
  AttentionCase c;
  c.tokens = {3};
  c.tokens_kv = {5};
  c.mask = causal_mask(CausalAlignment::top_left);  // j <= i
  EXPECT_EQ(explicit_mask(c), (Matrix{{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}}));
  c.mask = causal_mask(CausalAlignment::bottom_right);  // j <= i + 5 - 3
  EXPECT_EQ(explicit_mask(c), (Matrix{{1, 1, 1, 0, 0}, {1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}));
}

TEST(CpuAttentionReference, Neighborhood2DIsTheProductOfPerDimensionWindows) {
  // tokens 7 x 10, kernel 3 x 3, dilation 1 x 3. Query (6, 4): dim 0 window [4, 7) (shifted at
  // the border); dim 1: coordinate 4 is group 1 = {1, 4, 7}, index 1, window [0, 3) = all three.
  AttentionCase c;
  c.tokens = {7, 10};
  c.mask = neighborhood_mask({3, 3}, {1, 3});
  const Matrix m = explicit_mask(c);
  const int64_t query = 6 * 10 + 4;
  std::vector<int64_t> visible;
  for (int64_t j = 0; j < 70; ++j) {
    if (m[query][j]) visible.push_back(j);
  }
  EXPECT_EQ(visible, (std::vector<int64_t>{41, 44, 47, 51, 54, 57, 61, 64, 67}));
  // Every query sees exactly 3 x 3 keys (non-causal windows always hold the kernel size).
  for (const auto& row : m) {
    int count = 0;
    for (int x : row) count += x;
    EXPECT_EQ(count, 9);
  }
}

TEST(CpuAttentionReference, BlockMaskCoversWholeBlocksAndBroadcasts) {
  // Sq = 3, Sk = 5, blocks 2 x 3: query blocks {0,1},{2}; key blocks {0,1,2},{3,4}.
  HostTensor blocks = HostTensor::contiguous(DType::boolean, {1, 1, 2, 2});
  set_element(blocks.view, {0, 0, 0, 0}, 1);
  set_element(blocks.view, {0, 0, 0, 1}, 0);
  set_element(blocks.view, {0, 0, 1, 0}, 0);
  set_element(blocks.view, {0, 0, 1, 1}, 1);
  AttentionCase c;
  c.tokens = {3};
  c.tokens_kv = {5};
  c.mask = block_sparse_mask(blocks.view, 2, 3);
  const Matrix expected{{1, 1, 1, 0, 0}, {1, 1, 1, 0, 0}, {0, 0, 0, 1, 1}};
  EXPECT_EQ(explicit_mask(c, 0, 0), expected);
  EXPECT_EQ(explicit_mask(c, 1, 1), expected);
}

TEST(CpuAttentionReference, ElementMaskIsReadPerBatchAndHead) {
  HostTensor mask = HostTensor::contiguous(DType::boolean, {2, 1, 2, 2});
  set_element(mask.view, {0, 0, 0, 0}, 1);
  set_element(mask.view, {0, 0, 0, 1}, 0);
  set_element(mask.view, {0, 0, 1, 0}, 0);
  set_element(mask.view, {0, 0, 1, 1}, 0);
  set_element(mask.view, {1, 0, 0, 0}, 0);
  set_element(mask.view, {1, 0, 0, 1}, 1);
  set_element(mask.view, {1, 0, 1, 0}, 1);
  set_element(mask.view, {1, 0, 1, 1}, 1);
  AttentionCase c;
  c.tokens = {2};
  c.mask = element_sparse_mask(mask.view);
  EXPECT_EQ(explicit_mask(c, 0, 1), (Matrix{{1, 0}, {0, 0}}));
  EXPECT_EQ(explicit_mask(c, 1, 0), (Matrix{{0, 1}, {1, 1}}));
}

}  // namespace
// Zero-size problems (DESIGN §4): the reference defines them as the library does, so that the CLI's
// --check and the tests can compare them.
TEST(CpuAttentionReference, HeadDimZeroGivesEveryScoreZero) {
  // q, k [1, 3, 1, 0], v [1, 3, 1, 2], causal: row i averages v over keys 0..i, lse = log(i + 1).
  HostTensor q = HostTensor::contiguous(DType::f64, {1, 3, 1, 0});
  HostTensor k = HostTensor::contiguous(DType::f64, {1, 3, 1, 0});
  HostTensor v = HostTensor::contiguous(DType::f64, {1, 3, 1, 2});
  HostTensor out = HostTensor::contiguous(DType::f64, {1, 3, 1, 2});
  HostTensor lse = HostTensor::contiguous(DType::f32, {1, 3, 1});
  const double values[3][2] = {{1, 2}, {3, 5}, {8, -4}};
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t x = 0; x < 2; ++x) set_element(v.view, {0, j, 0, x}, values[j][x]);
  }
  AttentionForward problem;
  problem.q = q.view;
  problem.k = k.view;
  problem.v = v.view;
  problem.out = out.view;
  problem.lse = lse.view;
  problem.mask = causal_mask(CausalAlignment::top_left);
  // The default scale 1/sqrt(0) must not turn the empty dot products into NaN.
  cpu::reference::attention_forward_reference(problem, detail::describe_attention(q.view, k.view, v.view, std::nullopt),
                                              RunOptions{});
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t x = 0; x < 2; ++x) {
      double mean = 0;
      for (int64_t j = 0; j <= i; ++j) mean += values[j][x] / static_cast<double>(i + 1);
      EXPECT_NEAR(element_at(out.view, {0, i, 0, x}), mean, 1e-12) << "row " << i;
    }
    EXPECT_NEAR(element_at(lse.view, {0, i, 0}), std::log(static_cast<double>(i + 1)), 1e-6);
  }
}

TEST(CpuAttentionReference, NoHeadsWritesNothingAndDividesNothing) {
  AttentionCase c;
  c.heads_q = c.heads_kv = 0;
  AttentionTensors t(c);
  t.run_reference_forward();  // no division by the 0 KV heads; no row to write
  EXPECT_EQ(t.ref_out.view.numel(), 0);
}

}  // namespace attnkit::test
