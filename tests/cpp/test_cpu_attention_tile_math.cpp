// Pieces of the CPU attention kernels checked on their own: the polynomial exponential of the
// softmax and the slot layout of a tile's keys. The kernels are compiled here once more, for the
// build's baseline instruction set, in a namespace of this test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cpu/attention_isa.hpp"
#include "cpu/attention_kernel_includes.hpp"

#define ATTNKIT_CPU_ISA_NAMESPACE isa_tile_math_test
#define ATTNKIT_CPU_TILE_ROWS 2
#define ATTNKIT_CPU_SPLIT 1
#include "cpu/attention_kernels.hpp"

namespace attnkit::cpu {
namespace {

TEST(CpuAttentionTileMath, SoftmaxExpIsAccurateToFloatRounding) {
  double worst = 0.0;
  for (int i = 0; i <= 88000; ++i) {
    const float x = -87.0f + static_cast<float>(i) * 1e-3f;
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(isa_tile_math_test::softmax_exp(x) - exact) / exact);
  }
  EXPECT_LT(worst, 4e-7);  // a few units in the last place of a float
}

TEST(CpuAttentionTileMath, SoftmaxExpUnderflowsToExactlyZero) {
  EXPECT_EQ(isa_tile_math_test::softmax_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(isa_tile_math_test::softmax_exp(-87.5f), 0.0f);
  EXPECT_EQ(isa_tile_math_test::softmax_exp(-1e30f), 0.0f);
  EXPECT_EQ(isa_tile_math_test::softmax_exp(0.0f), 1.0f);
}

TEST(CpuAttentionTileMath, TileKeysMergeRowsIntoChunkPaddedSpans) {
  TileKeys keys;
  keys.row_runs[0] = {{0, 3}, {40, 45}};
  keys.row_runs[1] = {{2, 6}, {60, 61}};
  keys.build(2, 16);
  // [0,3) and [2,6) overlap -> [0,6). [40,45) starts 34 keys later: a new span. [60,61) starts
  // 15 keys after 45, closer than one chunk -> merged into [40,61).
  ASSERT_EQ(keys.spans.size(), 2u);
  EXPECT_EQ(keys.spans[0].begin, 0);
  EXPECT_EQ(keys.spans[0].end, 6);
  EXPECT_EQ(keys.spans[0].slot, 0);
  EXPECT_EQ(keys.spans[1].begin, 40);
  EXPECT_EQ(keys.spans[1].end, 61);
  EXPECT_EQ(keys.spans[1].slot, 16);  // 6 keys padded to one chunk
  EXPECT_EQ(keys.slots, 48);          // + 21 keys padded to two chunks
  ASSERT_EQ(keys.row_slots[0].size(), 2u);
  EXPECT_EQ(keys.row_slots[0][0].begin, 0);
  EXPECT_EQ(keys.row_slots[0][0].end, 3);
  EXPECT_EQ(keys.row_slots[0][1].begin, 16);
  EXPECT_EQ(keys.row_slots[0][1].end, 21);
  ASSERT_EQ(keys.row_slots[1].size(), 2u);
  EXPECT_EQ(keys.row_slots[1][0].begin, 2);
  EXPECT_EQ(keys.row_slots[1][0].end, 6);
  EXPECT_EQ(keys.row_slots[1][1].begin, 36);
  EXPECT_EQ(keys.row_slots[1][1].end, 37);
}

}  // namespace
}  // namespace attnkit::cpu
