// The inverse tile-range math of the backward's KV-tile-centric kernel (src/cuda/common/tile_range_inverse.hpp),
// checked on the CPU by brute force against the element-wise mask definitions of DESIGN §3: for every
// KV tile of every dilation group, the Q tiles it lists must be exactly those holding an attended
// (query, key) pair, and a Q tile must be full exactly when every existing query of it sees every key
// of the KV tile. Random 1-D problems cover neighborhoods (kernel size, dilation, stride, causal) and
// flat dense / causal masks (top-left and bottom-right, Sq != Sk) with random power-of-two boxes; the
// mask of a multi-dimensional problem is the product of its dimensions, so per-dimension exactness
// carries over. A last test checks that the inverse is the transpose of the forward's dim_tile_range.
// QueryTiles.*: the same walk in query indices (dim_query_tiles), at aligned origins (the tiles above) and
// at window origins (the dK/dV kernels' KvBoxSchedule): cover every query that sees the KV tile, never more
// tiles than aligned, the fewest when fewer, never past the query extent, exact full flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/common/tile_range_inverse.hpp"
#include "tile_range_test_support.hpp"

namespace attnkit::cuda {
namespace {

using test::log2_of;
using test::neighborhood_rule;

struct InverseProblem {
  int64_t extent = 1;     // query coordinates
  int64_t extent_kv = 1;  // key coordinates (differ from queries only for flat masks)
  int64_t dilation = 1;
  WindowRule rule{};
  int64_t q_box = 1;
  int64_t kv_box = 1;
};

// Element-wise definition on coordinates, independent of window_of.
bool attended(const InverseProblem& p, int64_t xq, int64_t xk) {
  switch (p.rule.kind) {
    case WindowKind::dense: return true;
    case WindowKind::prefix: return xk <= xq + p.rule.prefix_offset;
    case WindowKind::neighborhood: {
      const auto w = detail::neighborhood_window_of_coordinate(xq, p.extent, p.rule.window, p.dilation, p.rule.stride,
                                                               p.rule.causal);
      return xk % p.dilation == w.group && xk / p.dilation >= w.indices.begin && xk / p.dilation < w.indices.end;
    }
  }
  return false;
}

std::string describe(const InverseProblem& p) {
  return "L=" + std::to_string(p.extent) + " Lkv=" + std::to_string(p.extent_kv) +
         " kind=" + std::to_string(static_cast<int>(p.rule.kind)) + " w=" + std::to_string(p.rule.window) +
         " d=" + std::to_string(p.dilation) + " s=" + std::to_string(p.rule.stride) +
         " causal=" + std::to_string(p.rule.causal) + " off=" + std::to_string(p.rule.prefix_offset) +
         " qbox=" + std::to_string(p.q_box) + " kvbox=" + std::to_string(p.kv_box);
}

// Checks every (KV tile, Q tile) pair of every dilation group; returns the number of visited pairs.
int64_t check_inverse(const InverseProblem& p) {
  int64_t visited_pairs = 0;
  for (int64_t group = 0; group < p.dilation; ++group) {
    const int64_t n_q = detail::dilation_group_size(p.extent, p.dilation, group);
    const int64_t n_kv = detail::dilation_group_size(p.extent_kv, p.dilation, group);
    if (n_q <= 0 || n_kv <= 0) continue;
    const int64_t q_tiles = (n_q + p.q_box - 1) / p.q_box;
    const int64_t kv_tiles = (n_kv + p.kv_box - 1) / p.kv_box;
    for (int64_t kt = 0; kt < kv_tiles; ++kt) {
      const DimTileRange r = dim_tile_range_inverse(p.rule, kt * p.kv_box, p.kv_box, n_q, n_kv, p.q_box);
      for (int64_t qt = 0; qt < q_tiles; ++qt) {
        bool any = false;
        bool all = true;
        for (int64_t qi = qt * p.q_box; qi < std::min((qt + 1) * p.q_box, n_q); ++qi) {
          for (int64_t ki = kt * p.kv_box; ki < (kt + 1) * p.kv_box; ++ki) {
            const bool a = ki < n_kv && attended(p, qi * p.dilation + group, ki * p.dilation + group);
            any = any || a;
            all = all && a;
          }
        }
        const bool listed = qt >= r.first && qt < r.end;
        const bool full = tile_is_full(r, qt);
        EXPECT_EQ(listed, any) << describe(p) << " group " << group << " kv tile " << kt << " q tile " << qt
                               << (any ? ": a Q tile with attended pairs is not listed"
                                       : ": a Q tile without attended pairs is listed");
        EXPECT_EQ(full, any && all) << describe(p) << " group " << group << " kv tile " << kt << " q tile " << qt
                                    << ": full flag differs from the brute-force scan";
        if (listed) ++visited_pairs;
      }
    }
  }
  return visited_pairs;
}

int64_t random_box(std::mt19937_64& rng) { return int64_t{1} << std::uniform_int_distribution<int>(0, 4)(rng); }

TEST(TileRangeInverse, NeighborhoodListsExactlyTheQueryTilesThatSeeEachKvTile) {
  std::mt19937_64 rng(4001);
  int64_t visited = 0;
  for (int trial = 0; trial < 300; ++trial) {
    InverseProblem p;
    p.extent = p.extent_kv = std::uniform_int_distribution<int64_t>(1, 70)(rng);
    p.dilation = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, p.extent / 2))(rng);
    const int64_t max_window = std::max<int64_t>(1, p.extent / p.dilation);
    p.rule.kind = WindowKind::neighborhood;
    p.rule.window = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, max_window)(rng));
    p.rule.stride = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, p.rule.window)(rng));
    p.rule.causal = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    p.q_box = random_box(rng);
    p.kv_box = random_box(rng);
    visited += check_inverse(p);
    if (HasFailure()) return;
  }
  EXPECT_GT(visited, 1000);
}

TEST(TileRangeInverse, DenseListsEveryQueryTileAsFullExceptAtTheKeyExtent) {
  InverseProblem p;
  p.extent = 37;
  p.extent_kv = 45;
  p.q_box = 8;
  p.kv_box = 16;
  EXPECT_GT(check_inverse(p), 0);
  // KV tile 2 holds keys 32..47 of 45: it meets every query but no Q tile is full.
  const DimTileRange r = dim_tile_range_inverse(p.rule, 32, 16, 37, 45, 8);
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.end, 5);
  EXPECT_EQ(r.full_end - r.full_first, 0);
}

TEST(TileRangeInverse, FlatCausalTopLeftAndBottomRightWithDifferentLengths) {
  std::mt19937_64 rng(4002);
  int64_t visited = 0;
  for (int trial = 0; trial < 200; ++trial) {
    InverseProblem p;
    p.extent = std::uniform_int_distribution<int64_t>(1, 90)(rng);
    p.extent_kv = std::uniform_int_distribution<int64_t>(1, 90)(rng);
    p.rule.kind = WindowKind::prefix;
    p.rule.prefix_offset = std::uniform_int_distribution<int>(0, 1)(rng) == 1 ? p.extent_kv - p.extent : 0;
    p.q_box = random_box(rng);
    p.kv_box = random_box(rng);
    visited += check_inverse(p);
    if (HasFailure()) return;
  }
  EXPECT_GT(visited, 500);
}

TEST(TileRangeInverse, KeysNoQuerySeesListNoQueryTile) {
  // Top-left causal with Sq = 50 < Sk = 100: keys 50 and later are seen by no query.
  WindowRule rule;
  rule.kind = WindowKind::prefix;
  rule.prefix_offset = 0;
  const DimTileRange r = dim_tile_range_inverse(rule, 64, 16, 50, 100, 16);
  EXPECT_EQ(r.end - r.first, 0);
}

TEST(TileRangeInverse, IsTheTransposeOfTheForwardTileRange) {
  std::mt19937_64 rng(4003);
  for (int trial = 0; trial < 200; ++trial) {
    InverseProblem p;
    p.extent = p.extent_kv = std::uniform_int_distribution<int64_t>(2, 80)(rng);
    p.rule.kind = WindowKind::neighborhood;
    p.rule.window = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, p.extent)(rng));
    p.rule.stride = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, p.rule.window)(rng));
    p.rule.causal = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    p.q_box = random_box(rng);
    p.kv_box = random_box(rng);
    const int64_t n = p.extent;
    const int64_t q_tiles = (n + p.q_box - 1) / p.q_box;
    const int64_t kv_tiles = (n + p.kv_box - 1) / p.kv_box;
    for (int64_t qt = 0; qt < q_tiles; ++qt) {
      const int64_t q_last = std::min((qt + 1) * p.q_box, n) - 1;
      const DimTileRange forward = dim_tile_range(p.rule, qt * p.q_box, q_last, n, p.kv_box);
      for (int64_t kt = 0; kt < kv_tiles; ++kt) {
        const DimTileRange inverse = dim_tile_range_inverse(p.rule, kt * p.kv_box, p.kv_box, n, n, p.q_box);
        const bool forward_visits = kt >= forward.first && kt < forward.end;
        const bool inverse_visits = qt >= inverse.first && qt < inverse.end;
        ASSERT_EQ(forward_visits, inverse_visits) << describe(p) << " q tile " << qt << " kv tile " << kt;
      }
    }
  }
}

// --- Q tiles at window origins (dim_query_tiles, the dK/dV kernels' KvBoxSchedule) ------------------------

// For every KV tile of every dilation group, against the element-wise definition: the tiles start at a
// query index in [0, n_q), cover every query that sees a key of the KV tile, never outnumber the aligned
// tiles (dim_tile_range_inverse), and in window mode are as few as the queries allow when that is fewer
// (and otherwise the aligned ones); window tiles that moved never reach past n_q; every tile holds an
// attended pair; a tile is full exactly when every (existing query, key) pair in it is attended. Returns the
// tiles visited.
int64_t check_query_tiles(const InverseProblem& p, KvTileOrigin mode) {
  int64_t visited = 0;
  const int l = log2_of(p.q_box);
  for (int64_t group = 0; group < p.dilation; ++group) {
    const int64_t n_q = detail::dilation_group_size(p.extent, p.dilation, group);
    const int64_t n_kv = detail::dilation_group_size(p.extent_kv, p.dilation, group);
    if (n_q <= 0 || n_kv <= 0) continue;
    for (int64_t k_first = 0; k_first < n_kv; k_first += p.kv_box) {
      const DimKeyTiles t = dim_query_tiles(p.rule, k_first, p.kv_box, n_q, n_kv, l, mode);
      const DimTileRange aligned = dim_tile_range_inverse(p.rule, k_first, p.kv_box, n_q, n_kv, p.q_box);
      const std::string where = describe(p) + " mode=" + std::to_string(static_cast<int>(mode)) +
                                " group=" + std::to_string(group) + " keys from " + std::to_string(k_first) +
                                " origin=" + std::to_string(t.origin) + " count=" + std::to_string(t.count);
      // sees[qi][c]: query qi sees key k_first + c.
      std::vector<std::vector<char>> sees(static_cast<size_t>(n_q),
                                          std::vector<char>(static_cast<size_t>(p.kv_box), 0));
      int64_t first_query = n_q;
      int64_t end_query = 0;
      for (int64_t qi = 0; qi < n_q; ++qi) {
        for (int64_t c = 0; c < p.kv_box; ++c) {
          const int64_t k = k_first + c;
          const bool a = k < n_kv && attended(p, qi * p.dilation + group, k * p.dilation + group);
          sees[static_cast<size_t>(qi)][static_cast<size_t>(c)] = a ? 1 : 0;
          if (a) {
            first_query = std::min(first_query, qi);
            end_query = std::max(end_query, qi + 1);
          }
        }
      }
      const auto pairs_of_tile = [&](int64_t j) {
        bool any = false;
        bool all = true;
        for (int64_t r = 0; r < p.q_box; ++r) {
          const int64_t qi = t.origin + j * p.q_box + r;
          if (qi >= n_q) continue;  // missing queries carry no weight
          for (int64_t c = 0; c < p.kv_box; ++c) {
            const bool a = sees[static_cast<size_t>(qi)][static_cast<size_t>(c)] != 0;
            any = any || a;
            all = all && a;
          }
        }
        return std::pair<bool, bool>{any, all};
      };
      visited += test::expect_tiles_match_definition(t, aligned, p.q_box, n_q, first_query, end_query, mode, "queries",
                                                     /*moved_tiles_end_inside=*/true, where, pairs_of_tile);
      if (::testing::Test::HasFailure()) return visited;
    }
  }
  return visited;
}

InverseProblem random_neighborhood(std::mt19937_64& rng, int64_t max_extent) {
  InverseProblem p;
  p.extent = p.extent_kv = std::uniform_int_distribution<int64_t>(1, max_extent)(rng);
  p.dilation = std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, p.extent / 2))(rng);
  const int64_t max_window = std::max<int64_t>(1, p.extent / p.dilation);
  p.rule.kind = WindowKind::neighborhood;
  p.rule.window = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, max_window)(rng));
  p.rule.stride = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, p.rule.window)(rng));
  p.rule.causal = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  p.q_box = int64_t{1} << std::uniform_int_distribution<int>(0, 6)(rng);
  p.kv_box = int64_t{1} << std::uniform_int_distribution<int>(0, 6)(rng);
  return p;
}

TEST(QueryTiles, NeighborhoodTilesAtWindowOriginsMatchDefinition) {
  std::mt19937_64 rng(4101);
  int64_t visited = 0;
  for (int trial = 0; trial < 500 && !HasFailure(); ++trial) {
    visited += check_query_tiles(random_neighborhood(rng, 150), KvTileOrigin::window);
  }
  EXPECT_GT(visited, 1000);
}

TEST(QueryTiles, AlignedOriginsAreTheTilesOfTheInverseTileRange) {
  std::mt19937_64 rng(4102);
  for (int trial = 0; trial < 300 && !HasFailure(); ++trial) {
    check_query_tiles(random_neighborhood(rng, 150), KvTileOrigin::aligned);
  }
}

TEST(QueryTiles, FlatMasksAtWindowOriginsMatchDefinition) {
  std::mt19937_64 rng(4103);
  for (int trial = 0; trial < 300 && !HasFailure(); ++trial) {
    InverseProblem p;
    p.extent = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    p.extent_kv = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    if (std::uniform_int_distribution<int>(0, 2)(rng) != 0) {
      p.rule.kind = WindowKind::prefix;
      p.rule.prefix_offset = std::uniform_int_distribution<int>(0, 1)(rng) == 1 ? p.extent_kv - p.extent : 0;
    }
    p.q_box = int64_t{1} << std::uniform_int_distribution<int>(0, 6)(rng);
    p.kv_box = int64_t{1} << std::uniform_int_distribution<int>(0, 6)(rng);
    check_query_tiles(p, KvTileOrigin::window);
  }
}

TEST(QueryTiles, KeysOfAWindowOf64NeedThreeTilesOf64FromTheirFirstQuery) {
  // L = 8192, K = 64: keys [128, 256) are seen by queries [97, 288), which meet 4 aligned tiles of 64.
  const WindowRule rule = neighborhood_rule(64);
  const DimKeyTiles a = dim_query_tiles(rule, 128, 128, 8192, 8192, 6, KvTileOrigin::aligned);
  EXPECT_EQ(a.origin, 64);
  EXPECT_EQ(a.count, 4);
  const DimKeyTiles w = dim_query_tiles(rule, 128, 128, 8192, 8192, 6, KvTileOrigin::window);
  EXPECT_EQ(w.origin, 97);
  EXPECT_EQ(w.count, 3);
  EXPECT_EQ(w.full_end - w.full_first, 0) << "no query sees all 128 keys";
}

TEST(QueryTiles, TilesNearTheEndOfTheGridEndAtTheExtent) {
  // L = 1000, K = 64: keys [896, 1000) (a KV tile of 128 past the end) are seen by queries [865, 1000);
  // 3 tiles of 64 from 865 would pass the extent, so they end at it instead: from 808.
  const WindowRule rule = neighborhood_rule(64);
  const DimKeyTiles a = dim_query_tiles(rule, 896, 128, 1000, 1000, 6, KvTileOrigin::aligned);
  EXPECT_EQ(a.origin, 832);
  EXPECT_EQ(a.count, 3);
  const DimKeyTiles w = dim_query_tiles(rule, 896, 128, 1000, 1000, 6, KvTileOrigin::window);
  EXPECT_EQ(w.count, 3) << "no fewer tiles: aligned kept";
  EXPECT_EQ(w.origin, 832);
  // Keys [768, 896): queries [737, 928), 4 aligned tiles of 64 from 704 or 3 from 737 (ending at 929 <= 1000).
  const DimKeyTiles m = dim_query_tiles(rule, 768, 128, 1000, 1000, 6, KvTileOrigin::window);
  EXPECT_EQ(m.origin, 737);
  EXPECT_EQ(m.count, 3);
}

TEST(QueryTiles, FullTilesAreThoseWhoseQueriesSeeEveryKey) {
  // K = 31, keys [60, 68): queries [45, 83) see some key, [52, 76) every key. Q boxes of 8: 5 tiles from 45
  // instead of the 6 aligned ones from 40; of [45, 53), [53, 61), [61, 69), [69, 77), [77, 85) the second
  // and third lie inside [52, 76).
  const WindowRule rule = neighborhood_rule(31);
  int64_t bound[kInverseBounds];
  for (int b = 0; b < kInverseBounds; ++b) bound[b] = inverse_bound(rule, b, 60, 67, 200, 200);
  EXPECT_EQ(bound[0], 45);
  EXPECT_EQ(bound[1], 83);
  EXPECT_EQ(bound[2], 52);
  EXPECT_EQ(bound[3], 76);
  const DimKeyTiles w = dim_query_tiles_of_bounds(bound, 200, 3, KvTileOrigin::window);
  EXPECT_EQ(w.origin, 45);
  EXPECT_EQ(w.count, 5);
  EXPECT_EQ(w.full_first, 1);
  EXPECT_EQ(w.full_end, 3);
}

TEST(QueryTiles, CausalBottomRightMayStartAtItsFirstQuery) {
  // Sq = 1000, Sk = 1005 bottom-right: keys [128, 256) are seen by queries from 123 on; 14 tiles of 64
  // from 104 (ending at 1000) instead of the 15 aligned ones from 64.
  WindowRule rule;
  rule.kind = WindowKind::prefix;
  rule.prefix_offset = 5;
  const DimKeyTiles a = dim_query_tiles(rule, 128, 128, 1000, 1005, 6, KvTileOrigin::aligned);
  EXPECT_EQ(a.count, 15);
  const DimKeyTiles w = dim_query_tiles(rule, 128, 128, 1000, 1005, 6, KvTileOrigin::window);
  EXPECT_EQ(w.count, 14);
  EXPECT_EQ(w.origin, 104);
}

}  // namespace
}  // namespace attnkit::cuda
