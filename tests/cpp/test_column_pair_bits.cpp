// column_pair_bits (src/cuda/common/column_pair_bits.hpp): the Hopper dK/dV kernel's 16 query columns of a
// 64-column mask row, against a test per column, on random rows and single bits for every column offset.
#include "cuda/common/column_pair_bits.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace {

uint32_t columns_one_by_one(uint64_t row, int col0) {
  uint32_t bits = 0;
  for (int j = 0; j < 16; ++j) {
    const int column = col0 + 8 * (j / 2) + j % 2;
    bits |= static_cast<uint32_t>((row >> column) & 1u) << j;
  }
  return bits;
}

TEST(ColumnPairBits, MatchesATestPerColumnOnRandomRows) {
  std::mt19937_64 random(20261127);
  for (int trial = 0; trial < 4000; ++trial) {
    const uint64_t row = random();
    for (int col0 = 0; col0 < 8; col0 += 2) {
      ASSERT_EQ(attnkit::cuda::column_pair_bits(static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32), col0),
                columns_one_by_one(row, col0))
          << "row " << std::hex << row << " col0 " << std::dec << col0;
    }
  }
}

TEST(ColumnPairBits, EachColumnLandsOnItsOwnBitAndNoOtherColumnLeaks) {
  for (int column = 0; column < 64; ++column) {
    const uint64_t row = uint64_t{1} << column;
    for (int col0 = 0; col0 < 8; col0 += 2) {
      const uint32_t bits =
          attnkit::cuda::column_pair_bits(static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32), col0);
      const int offset = column - col0;
      const bool held = offset >= 0 && offset % 8 < 2;  // the thread's columns col0 + 8 m + e
      EXPECT_EQ(bits, held ? 1u << (2 * (offset / 8) + offset % 8) : 0u) << "column " << column << " col0 " << col0;
    }
  }
  EXPECT_EQ(attnkit::cuda::column_pair_bits(~0u, ~0u, 6), 0xFFFFu);
  EXPECT_EQ(attnkit::cuda::column_pair_bits(0u, 0u, 0), 0u);
}

}  // namespace
