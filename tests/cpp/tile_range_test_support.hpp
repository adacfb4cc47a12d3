// What the tile-range suites share (test_tile_range.cpp: the forward's KV tiles per Q tile, dim_key_tiles;
// test_tile_range_inverse.cpp: the dK/dV kernels' Q tiles per KV tile, dim_query_tiles): the checks of one
// tile list at aligned or window origins against the brute-force span of the indices that attend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/common/tile_range.hpp"

namespace attnkit::test {

inline int log2_of(int64_t box) {
  int l = 0;
  while ((int64_t{1} << l) < box) ++l;
  return l;
}

inline cuda::WindowRule neighborhood_rule(int32_t window, bool causal = false, int32_t stride = 1) {
  cuda::WindowRule rule;
  rule.kind = cuda::WindowKind::neighborhood;
  rule.window = window;
  rule.stride = stride;
  rule.causal = causal;
  return rule;
}

// One tile list `t` of boxes of `box` indices along an axis of n (keys for dim_key_tiles, queries for
// dim_query_tiles; `indices` names them), against the brute force: [seen_first, seen_end), the indices
// that attend (empty: no tile), and `aligned`, the aligned tiles of the same walk. The tiles start at an
// index in [0, n), cover [seen_first, seen_end), never outnumber the aligned tiles; at aligned origins
// they are those, at window origins as few as the span allows when that is fewer (and otherwise the
// aligned ones; moved tiles end by n when moved_tiles_end_inside). pairs_of(j) gives {any, all}: whether
// some and whether every (existing query, key) pair of tile j is attended; a tile must hold an attended
// pair, and is full exactly when all are. Returns the tiles checked.
template <typename PairsOf>
int64_t expect_tiles_match_definition(const cuda::DimKeyTiles& t, const cuda::DimTileRange& aligned, int64_t box,
                                      int64_t n, int64_t seen_first, int64_t seen_end, cuda::KvTileOrigin mode,
                                      const std::string& indices, bool moved_tiles_end_inside, const std::string& where,
                                      PairsOf&& pairs_of) {
  EXPECT_LE(t.count, aligned.end - aligned.first) << "more tiles than aligned: " << where;
  if (seen_end <= seen_first) {
    EXPECT_EQ(t.count, 0) << "tiles visited though no query sees a key: " << where;
    return 0;
  }
  EXPECT_GE(t.origin, 0) << where;
  EXPECT_LT(t.origin, n) << "the first tile starts past the extent: " << where;
  EXPECT_LE(t.origin, seen_first) << indices << " before the first tile: " << where;
  EXPECT_GE(t.origin + t.count * box, seen_end) << indices << " after the last tile: " << where;
  if (mode == cuda::KvTileOrigin::aligned) {
    EXPECT_EQ(t.origin, aligned.first * box) << where;
    EXPECT_EQ(t.count, aligned.end - aligned.first) << where;
    EXPECT_EQ(t.full_first, aligned.full_first - aligned.first) << where;
    EXPECT_EQ(t.full_end, aligned.full_end - aligned.first) << where;
  } else {
    const int64_t fewest = (seen_end - seen_first + box - 1) / box;
    EXPECT_EQ(t.count, std::min(fewest, aligned.end - aligned.first)) << where;
    if (t.count == aligned.end - aligned.first) {
      EXPECT_EQ(t.origin, aligned.first * box) << "aligned tiles kept when no worse: " << where;
    } else if (moved_tiles_end_inside) {
      EXPECT_LE(t.origin + t.count * box, n) << "a moved tile reaches past the " << indices << ": " << where;
    }
  }
  for (int64_t j = 0; j < t.count; ++j) {
    const std::pair<bool, bool> pairs = pairs_of(j);
    EXPECT_TRUE(pairs.first) << "tile " << j << " holds no attended pair: " << where;
    EXPECT_EQ(j >= t.full_first && j < t.full_end, pairs.second) << "full flag of tile " << j << ": " << where;
  }
  return t.count;
}

}  // namespace attnkit::test
