// The neighborhood window of DESIGN §3, checked against tables worked out by hand from its text.
// Notation in the comments: n = group size, left = floor(w/2), right = floor(w/2) + w mod 2 - 1,
// g = stride-group leader, a = window start.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/neighborhood_window.hpp"

namespace attnkit::detail {
namespace {

struct Expected {
  int64_t begin;
  int64_t end;
};

void expect_windows(int64_t n, int64_t window, int64_t stride, bool causal, const std::vector<Expected>& table) {
  ASSERT_EQ(static_cast<int64_t>(table.size()), n);
  for (int64_t i = 0; i < n; ++i) {
    const IndexRange r = neighborhood_window(i, n, window, stride, causal);
    EXPECT_EQ(r.begin, table[i].begin) << "query " << i;
    EXPECT_EQ(r.end, table[i].end) << "query " << i;
  }
}

TEST(NeighborhoodWindow, OddKernelIsCentredAndShiftedInsideAtBorders) {
  // L=7, w=3: left=1, right=1, g=i. a=max(i-1,0); at i=6, g+right=7 >= 7 shifts a back by 1.
  expect_windows(7, 3, 1, false,
                 {{0, 3},    // i=0: a=max(-1,0)=0
                  {0, 3},    // i=1: a=0
                  {1, 4},    // i=2
                  {2, 5},    // i=3
                  {3, 6},    // i=4
                  {4, 7},    // i=5: g+right=6 < 7, no shift
                  {4, 7}});  // i=6: a=5, shifted by 6+1-6=1 -> 4
}

TEST(NeighborhoodWindow, EvenKernelHasOneMoreKeyOnTheLeft) {
  // L=8, w=4: left=2, right=1.
  expect_windows(8, 4, 1, false,
                 {{0, 4},    // i=0: a=max(-2,0)=0
                  {0, 4},    // i=1: a=max(-1,0)=0
                  {0, 4},    // i=2: a=0
                  {1, 5},    // i=3: keys 1,2 | 3 | 4
                  {2, 6},    // i=4
                  {3, 7},    // i=5
                  {4, 8},    // i=6: g+right=7 < 8, no shift
                  {4, 8}});  // i=7: a=5, shifted by 7+1-7=1 -> 4
}

TEST(NeighborhoodWindow, DilationSplitsExtentIntoGroupsOfUnequalSize) {
  // L=10, d=3: group 0 = {0,3,6,9} (n=4), group 1 = {1,4,7} (n=3), group 2 = {2,5,8} (n=3).
  EXPECT_EQ(dilation_group_size(10, 3, 0), 4);
  EXPECT_EQ(dilation_group_size(10, 3, 1), 3);
  EXPECT_EQ(dilation_group_size(10, 3, 2), 3);
  // w=3 on group indices. n=4: i=0,1 -> [0,3); i=2 -> [1,4); i=3 -> a=2 shifted by 1 -> [1,4).
  // n=3: i=0,1 -> [0,3); i=2 -> a=1 shifted by 1 -> [0,3).
  const std::vector<CoordinateWindow> table{
      {0, {0, 3}},  // x=0: group 0, i=0 -> keys at 0,3,6
      {1, {0, 3}},  // x=1: group 1, i=0 -> keys 1,4,7
      {2, {0, 3}},  // x=2: group 2, i=0
      {0, {0, 3}},  // x=3: group 0, i=1
      {1, {0, 3}},  // x=4: group 1, i=1
      {2, {0, 3}},  // x=5: group 2, i=1
      {0, {1, 4}},  // x=6: group 0, i=2 -> keys 3,6,9
      {1, {0, 3}},  // x=7: group 1, i=2 (shifted)
      {2, {0, 3}},  // x=8: group 2, i=2 (shifted)
      {0, {1, 4}},  // x=9: group 0, i=3 (shifted)
  };
  for (int64_t x = 0; x < 10; ++x) {
    const CoordinateWindow w = neighborhood_window_of_coordinate(x, 10, 3, 3, 1, false);
    EXPECT_EQ(w.group, table[x].group) << "coordinate " << x;
    EXPECT_EQ(w.indices.begin, table[x].indices.begin) << "coordinate " << x;
    EXPECT_EQ(w.indices.end, table[x].indices.end) << "coordinate " << x;
  }
}

TEST(NeighborhoodWindow, StrideTwoSharesTheLeadersWindow) {
  // L=9, w=5, s=2: left=right=2, g=min(floor(i/2)*2+1, 8).
  expect_windows(9, 5, 2, false,
                 {{0, 5},    // i=0: g=1, a=max(-1,0)=0
                  {0, 5},    // i=1: g=1
                  {1, 6},    // i=2: g=3, a=1
                  {1, 6},    // i=3: g=3
                  {3, 8},    // i=4: g=5, a=3, g+right=7 < 9
                  {3, 8},    // i=5
                  {4, 9},    // i=6: g=7, a=5, shifted by 7+2-8=1 -> 4
                  {4, 9},    // i=7
                  {4, 9}});  // i=8: g=min(9,8)=8, a=6, shifted by 8+2-8=2 -> 4
}

TEST(NeighborhoodWindow, StrideThreeSharesTheLeadersWindow) {
  // L=10, w=5, s=3: left=right=2, g=min(floor(i/3)*3+1, 9).
  expect_windows(10, 5, 3, false,
                 {{0, 5},
                  {0, 5},
                  {0, 5},  // i=0..2: g=1, a=0
                  {2, 7},
                  {2, 7},
                  {2, 7},  // i=3..5: g=4, a=2
                  {5, 10},
                  {5, 10},
                  {5, 10},    // i=6..8: g=7, a=5, g+right=9 < 10
                  {5, 10}});  // i=9: g=min(10,9)=9, a=7, shifted by 9+2-9=2 -> 5
}

TEST(NeighborhoodWindow, CausalWindowEndsAtTheQuery) {
  // L=6, w=3: g=i, a=max(i-2,0), end=min(i+1,6).
  expect_windows(6, 3, 1, true, {{0, 1}, {0, 2}, {0, 3}, {1, 4}, {2, 5}, {3, 6}});
}

TEST(NeighborhoodWindow, CausalStrideStartsFromTheLastOfTheStrideGroup) {
  // L=7, w=3, s=2: g=min(floor(i/2)*2+1, 6), a=max(g-2,0), end=min(i+1,7).
  expect_windows(7, 3, 2, true,
                 {{0, 1},    // i=0: g=1, a=0
                  {0, 2},    // i=1: g=1
                  {1, 3},    // i=2: g=3, a=1 (only 2 keys: the window is the leader's)
                  {1, 4},    // i=3: g=3
                  {3, 5},    // i=4: g=5, a=3
                  {3, 6},    // i=5: g=5
                  {4, 7}});  // i=6: g=min(7,6)=6, a=4
}

TEST(NeighborhoodWindow, FullKernelIsDense) {
  // w=L: every window is the whole group, for odd and even kernels.
  expect_windows(5, 5, 1, false, {{0, 5}, {0, 5}, {0, 5}, {0, 5}, {0, 5}});
  expect_windows(6, 6, 1, false, {{0, 6}, {0, 6}, {0, 6}, {0, 6}, {0, 6}, {0, 6}});
}

TEST(NeighborhoodWindow, CausalFullKernelIsCausalDense) {
  // w=L, causal: a=max(i-4,0)=0, end=i+1.
  expect_windows(5, 5, 1, true, {{0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}});
}

TEST(NeighborhoodWindow, RandomWindowsHaveKernelSizeKeysInsideTheGroup) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t extent = std::uniform_int_distribution<int64_t>(1, 40)(rng);
    const int64_t dilation = std::uniform_int_distribution<int64_t>(1, extent)(rng);
    const int64_t window = std::uniform_int_distribution<int64_t>(1, extent / dilation)(rng);
    const int64_t stride = std::uniform_int_distribution<int64_t>(1, window)(rng);
    const bool causal = std::bernoulli_distribution(0.5)(rng);
    for (int64_t x = 0; x < extent; ++x) {
      const CoordinateWindow w = neighborhood_window_of_coordinate(x, extent, window, dilation, stride, causal);
      const int64_t n = dilation_group_size(extent, dilation, w.group);
      const int64_t i = x / dilation;
      SCOPED_TRACE(::testing::Message() << "L=" << extent << " w=" << window << " d=" << dilation << " s=" << stride
                                        << " causal=" << causal << " x=" << x);
      ASSERT_EQ(w.group, x % dilation);
      ASSERT_GE(w.indices.begin, 0);
      ASSERT_LE(w.indices.end, n);
      if (causal) {
        ASSERT_LE(w.indices.end - w.indices.begin, window);
        ASSERT_EQ(w.indices.end, i + 1);
        ASSERT_LE(w.indices.begin, i);
      } else {
        ASSERT_EQ(w.indices.end - w.indices.begin, window);
        if (stride == 1) {
          ASSERT_LE(w.indices.begin, i);
          ASSERT_GT(w.indices.end, i);
        }
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::detail
