// The tile-range math of the box-tiled GPU kernels (src/cuda/common/tile_range.hpp), checked on the CPU
// against the element-wise mask definitions of DESIGN §3 for random problems: neighborhoods in 1-D,
// 2-D and 3-D (kernel size, dilation, stride, causal per dimension), and flat dense / causal masks
// (top-left and bottom-right, Sq != Sk), each with random power-of-two Q and KV tile boxes.
//
// Guarantees checked, per Q tile (its valid queries) and per KV tile of the same dilation group:
//   1. every attended (query, key) pair lies in a visited KV tile;
//   2. a tile is FULL exactly when every (valid query, key) pair in it is attended, so full tiles never
//      need masking and no all-attended tile is masked;
//   3. every visited tile holds at least one attended pair (no visited tile is empty).
// The same for dim_key_tiles, whose tiles may start at any key (the forward's window origins), per
// dimension (KeyTiles tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "tile_range_test_support.hpp"

namespace attnkit::cuda {
namespace {

using test::log2_of;
using test::neighborhood_rule;

struct DimProblem {
  int64_t extent = 1;     // coordinates (queries and keys share them for neighborhoods)
  int64_t extent_kv = 1;  // flat masks: keys may differ from queries
  int64_t dilation = 1;
  WindowRule rule{};
  int64_t q_box = 1;
  int64_t kv_box = 1;
  // Element-wise definition for this dimension: is key coordinate xk attended by query coordinate xq?
  bool causal_flat = false;
  int64_t causal_offset = 0;
};

bool attended_in_dim(const DimProblem& p, int64_t xq, int64_t xk) {
  switch (p.rule.kind) {
    case WindowKind::dense: return true;
    case WindowKind::prefix: return xk <= xq + p.causal_offset;
    case WindowKind::neighborhood: {
      const auto w = detail::neighborhood_window_of_coordinate(xq, p.extent, p.rule.window, p.dilation, p.rule.stride,
                                                               p.rule.causal);
      return xk % p.dilation == w.group && xk / p.dilation >= w.indices.begin && xk / p.dilation < w.indices.end;
    }
  }
  return false;
}

std::string describe(const std::vector<DimProblem>& dims) {
  std::string s;
  for (const auto& d : dims) {
    s += "[L=" + std::to_string(d.extent) + " Lkv=" + std::to_string(d.extent_kv) +
         " kind=" + std::to_string(static_cast<int>(d.rule.kind)) + " w=" + std::to_string(d.rule.window) +
         " d=" + std::to_string(d.dilation) + " s=" + std::to_string(d.rule.stride) +
         " causal=" + std::to_string(d.rule.causal) + " off=" + std::to_string(d.rule.prefix_offset) +
         " qbox=" + std::to_string(d.q_box) + " kvbox=" + std::to_string(d.kv_box) + "] ";
  }
  return s;
}

// Walks every Q tile of every dilation group and checks the three guarantees. Returns the number of
// visited tiles (so callers can assert the walk did real work).
int64_t check_problem(const std::vector<DimProblem>& dims) {
  const int n_dims = static_cast<int>(dims.size());
  int64_t visited_total = 0;
  // Enumerate dilation groups and Q tiles per dimension as mixed-radix counters.
  std::array<int64_t, 3> group{0, 0, 0};
  while (true) {
    std::array<int64_t, 3> n_q{1, 1, 1}, n_kv{1, 1, 1}, q_tiles{1, 1, 1};
    for (int d = 0; d < n_dims; ++d) {
      n_q[d] = detail::dilation_group_size(dims[d].extent, dims[d].dilation, group[d]);
      n_kv[d] = detail::dilation_group_size(dims[d].extent_kv, dims[d].dilation, group[d]);
      q_tiles[d] = (n_q[d] + dims[d].q_box - 1) / dims[d].q_box;
    }
    std::array<int64_t, 3> tile{0, 0, 0};
    while (true) {
      // Per-dimension ranges of this Q tile.
      std::array<DimTileRange, 3> range{};
      std::array<int64_t, 3> q_first{0, 0, 0}, q_last{0, 0, 0};
      for (int d = 0; d < n_dims; ++d) {
        q_first[d] = tile[d] * dims[d].q_box;
        q_last[d] = std::min(q_first[d] + dims[d].q_box, n_q[d]) - 1;
        range[d] = dim_tile_range(dims[d].rule, q_first[d], q_last[d], n_kv[d], dims[d].kv_box);
      }
      // All queries x all keys of this group, per dimension as index lists.
      // For each dimension: attended[d][qi][ki] on indices, then combine (the mask is a product).
      std::vector<std::vector<std::vector<char>>> attended(n_dims);
      for (int d = 0; d < n_dims; ++d) {
        const int64_t nq = q_last[d] - q_first[d] + 1;
        attended[d].assign(nq, std::vector<char>(n_kv[d], 0));
        for (int64_t qi = 0; qi < nq; ++qi) {
          const int64_t xq = (q_first[d] + qi) * dims[d].dilation + group[d];
          for (int64_t ki = 0; ki < n_kv[d]; ++ki) {
            const int64_t xk = ki * dims[d].dilation + group[d];
            attended[d][qi][ki] = attended_in_dim(dims[d], xq, xk) ? 1 : 0;
          }
        }
      }
      // Per KV tile of the group (product over dimensions): any / all attended pairs.
      std::array<int64_t, 3> kv_tiles{1, 1, 1};
      for (int d = 0; d < n_dims; ++d) kv_tiles[d] = (n_kv[d] + dims[d].kv_box - 1) / dims[d].kv_box;
      std::array<int64_t, 3> kt{0, 0, 0};
      while (true) {
        bool visited = true;
        bool full = true;
        for (int d = 0; d < n_dims; ++d) {
          visited = visited && kt[d] >= range[d].first && kt[d] < range[d].end;
          full = full && tile_is_full(range[d], kt[d]);
        }
        // A pair is attended iff attended in every dimension; over a product of index sets, "some pair
        // attended" = per dimension some (q, k) attended, and "all pairs attended" = per dimension all
        // (q, k) attended, where keys run over the whole tile box (keys past the extents never are).
        bool any = true;
        bool all = true;
        for (int d = 0; d < n_dims; ++d) {
          bool any_d = false;
          bool all_d = true;
          for (std::size_t qi = 0; qi < attended[d].size(); ++qi) {
            for (int64_t c = 0; c < dims[d].kv_box; ++c) {
              const int64_t ki = kt[d] * dims[d].kv_box + c;
              const bool a = ki < n_kv[d] && attended[d][qi][ki];
              any_d = any_d || a;
              all_d = all_d && a;
            }
          }
          any = any && any_d;
          all = all && all_d;
        }
        const std::string where = describe(dims) + " group (" + std::to_string(group[0]) + "," +
                                  std::to_string(group[1]) + "," + std::to_string(group[2]) + ") q tile (" +
                                  std::to_string(tile[0]) + "," + std::to_string(tile[1]) + "," +
                                  std::to_string(tile[2]) + ") kv tile (" + std::to_string(kt[0]) + "," +
                                  std::to_string(kt[1]) + "," + std::to_string(kt[2]) + ")";
        if (any) {
          EXPECT_TRUE(visited) << "attended pairs in an unvisited tile: " << where;
        }
        EXPECT_EQ(full, visited && all) << "full flag disagrees with the definition: " << where;
        if (visited) {
          EXPECT_TRUE(any) << "visited tile with no attended pair: " << where;
          ++visited_total;
        }
        if (::testing::Test::HasFailure()) return visited_total;
        int d = n_dims - 1;
        while (d >= 0 && ++kt[d] == kv_tiles[d]) kt[d--] = 0;
        if (d < 0) break;
      }
      int d = n_dims - 1;
      while (d >= 0 && ++tile[d] == q_tiles[d]) tile[d--] = 0;
      if (d < 0) break;
    }
    int d = n_dims - 1;
    while (d >= 0 && ++group[d] == dims[d].dilation) group[d--] = 0;
    if (d < 0) break;
  }
  return visited_total;
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

DimProblem random_neighborhood_dim(std::mt19937_64& rng, int64_t max_extent) {
  DimProblem p;
  p.extent = uniform(rng, 1, max_extent);
  p.extent_kv = p.extent;
  p.rule.kind = WindowKind::neighborhood;
  p.rule.window = static_cast<int32_t>(uniform(rng, 1, p.extent));
  p.dilation = uniform(rng, 1, p.extent / p.rule.window);
  p.rule.stride = static_cast<int32_t>(uniform(rng, 1, p.rule.window));
  p.rule.causal = uniform(rng, 0, 1) == 1;
  p.q_box = int64_t{1} << uniform(rng, 0, 4);
  p.kv_box = int64_t{1} << uniform(rng, 0, 4);
  return p;
}

TEST(TileRange, NeighborhoodOneDimensionalMatchesDefinition) {
  std::mt19937_64 rng(11);
  int64_t visited = 0;
  for (int trial = 0; trial < 300 && !HasFailure(); ++trial)
    visited += check_problem({random_neighborhood_dim(rng, 80)});
  EXPECT_GT(visited, 0);
}

TEST(TileRange, NeighborhoodTwoDimensionalMatchesDefinition) {
  std::mt19937_64 rng(12);
  int64_t visited = 0;
  for (int trial = 0; trial < 120 && !HasFailure(); ++trial) {
    visited += check_problem({random_neighborhood_dim(rng, 24), random_neighborhood_dim(rng, 24)});
  }
  EXPECT_GT(visited, 0);
}

TEST(TileRange, NeighborhoodThreeDimensionalMatchesDefinition) {
  std::mt19937_64 rng(13);
  int64_t visited = 0;
  for (int trial = 0; trial < 60 && !HasFailure(); ++trial) {
    visited += check_problem(
        {random_neighborhood_dim(rng, 9), random_neighborhood_dim(rng, 11), random_neighborhood_dim(rng, 10)});
  }
  EXPECT_GT(visited, 0);
}

TEST(TileRange, FlatCausalBothAlignmentsMatchDefinition) {
  std::mt19937_64 rng(14);
  int64_t visited = 0;
  for (int trial = 0; trial < 200 && !HasFailure(); ++trial) {
    DimProblem p;
    p.extent = uniform(rng, 1, 300);
    p.extent_kv = uniform(rng, 1, 300);
    p.rule.kind = WindowKind::prefix;
    const bool bottom_right = uniform(rng, 0, 1) == 1;
    p.rule.prefix_offset = bottom_right ? p.extent_kv - p.extent : 0;
    p.causal_offset = p.rule.prefix_offset;
    p.q_box = int64_t{1} << uniform(rng, 0, 7);
    p.kv_box = int64_t{1} << uniform(rng, 0, 6);
    visited += check_problem({p});
  }
  EXPECT_GT(visited, 0);
}

TEST(TileRange, DenseVisitsEveryTileAndMasksOnlyTheTail) {
  std::mt19937_64 rng(15);
  for (int trial = 0; trial < 100 && !HasFailure(); ++trial) {
    DimProblem p;
    p.extent = uniform(rng, 1, 400);
    p.extent_kv = uniform(rng, 1, 400);
    p.q_box = int64_t{1} << uniform(rng, 0, 7);
    p.kv_box = int64_t{1} << uniform(rng, 0, 6);
    check_problem({p});
    const DimTileRange r = dim_tile_range(p.rule, 0, std::min(p.q_box, p.extent) - 1, p.extent_kv, p.kv_box);
    EXPECT_EQ(r.first, 0);
    EXPECT_EQ(r.end, (p.extent_kv + p.kv_box - 1) / p.kv_box);
    EXPECT_EQ(r.full_end - r.full_first, p.extent_kv / p.kv_box) << "only a tile crossing the end is partial";
  }
}

TEST(TileRange, BottomRightCausalQueryTileWithNoKeysVisitsNothing) {
  // Sq = 200 > Sk = 50: queries 0..149 see no key; a Q tile inside them visits no tile.
  WindowRule rule;
  rule.kind = WindowKind::prefix;
  rule.prefix_offset = 50 - 200;
  const DimTileRange r = dim_tile_range(rule, 64, 127, 50, 16);
  EXPECT_EQ(r.end - r.first, 0);
  EXPECT_EQ(r.full_end - r.full_first, 0);
  const DimTileRange last = dim_tile_range(rule, 192, 199, 50, 16);
  EXPECT_EQ(last.first, 0);
  EXPECT_EQ(last.end, 4);  // keys 0..49 -> tiles 0..3
}

TEST(TileRange, WindowOfNeighborhoodAlwaysHasKernelSizeKeys) {
  WindowRule rule;
  rule.kind = WindowKind::neighborhood;
  rule.window = 7;
  rule.stride = 3;
  for (int64_t i = 0; i < 20; ++i) {
    const auto w = window_of(rule, i, 20);
    EXPECT_EQ(w.end - w.begin, 7) << "query " << i;
    EXPECT_GE(w.begin, 0);
    EXPECT_LE(w.end, 20);
  }
}

// --- KV tiles at window origins (dim_key_tiles, the forward's BoxPolicy) --------------------------------

// Per dimension (the product argument of check_problem carries the result to several dimensions), for
// every dilation group and Q tile, against the element-wise definition: the tiles cover every attended
// key, start inside the extent at a non-negative key, never outnumber the aligned tiles, and in window
// mode are as few as the union allows when that is fewer; every tile holds an attended pair; a tile is
// full exactly when every (valid query, key) pair in it is attended. Returns the tiles visited.
int64_t check_key_tiles(const DimProblem& p, KvTileOrigin mode) {
  int64_t visited_total = 0;
  const int l = log2_of(p.kv_box);
  for (int64_t group = 0; group < p.dilation; ++group) {
    const int64_t n_q = detail::dilation_group_size(p.extent, p.dilation, group);
    const int64_t n_kv = detail::dilation_group_size(p.extent_kv, p.dilation, group);
    for (int64_t q_first = 0; q_first < n_q; q_first += p.q_box) {
      const int64_t q_last = std::min(q_first + p.q_box, n_q) - 1;
      const DimKeyTiles t = dim_key_tiles(p.rule, q_first, q_last, n_kv, l, mode);
      const DimTileRange aligned = dim_tile_range(p.rule, q_first, q_last, n_kv, p.kv_box);
      const std::string where = describe({p}) + " mode=" + std::to_string(static_cast<int>(mode)) +
                                " group=" + std::to_string(group) + " q=[" + std::to_string(q_first) + "," +
                                std::to_string(q_last) + "] origin=" + std::to_string(t.origin) +
                                " count=" + std::to_string(t.count);
      // attended[qi][k] for the tile's queries and every key of the group.
      std::vector<std::vector<char>> attended(q_last - q_first + 1, std::vector<char>(n_kv, 0));
      int64_t union_begin = n_kv;
      int64_t union_end = 0;
      for (int64_t qi = q_first; qi <= q_last; ++qi) {
        for (int64_t k = 0; k < n_kv; ++k) {
          const bool a = attended_in_dim(p, qi * p.dilation + group, k * p.dilation + group);
          attended[qi - q_first][k] = a ? 1 : 0;
          if (a) {
            union_begin = std::min(union_begin, k);
            union_end = std::max(union_end, k + 1);
          }
        }
      }
      const auto pairs_of_tile = [&](int64_t j) {
        bool any = false;
        bool all = true;
        for (std::size_t qi = 0; qi < attended.size(); ++qi) {
          for (int64_t c = 0; c < p.kv_box; ++c) {
            const int64_t k = t.origin + j * p.kv_box + c;
            const bool a = k < n_kv && attended[qi][k];
            any = any || a;
            all = all && a;
          }
        }
        return std::pair<bool, bool>{any, all};
      };
      visited_total +=
          test::expect_tiles_match_definition(t, aligned, p.kv_box, n_kv, union_begin, union_end, mode, "keys",
                                              /*moved_tiles_end_inside=*/false, where, pairs_of_tile);
      if (::testing::Test::HasFailure()) return visited_total;
    }
  }
  return visited_total;
}

TEST(KeyTiles, NeighborhoodTilesAtWindowOriginsMatchDefinition) {
  std::mt19937_64 rng(21);
  int64_t visited = 0;
  for (int trial = 0; trial < 600 && !HasFailure(); ++trial) {
    DimProblem p = random_neighborhood_dim(rng, 160);
    p.q_box = int64_t{1} << uniform(rng, 0, 7);
    p.kv_box = int64_t{1} << uniform(rng, 0, 7);
    visited += check_key_tiles(p, KvTileOrigin::window);
  }
  EXPECT_GT(visited, 0);
}

TEST(KeyTiles, AlignedOriginsAreTheTilesOfDimTileRange) {
  std::mt19937_64 rng(22);
  for (int trial = 0; trial < 300 && !HasFailure(); ++trial) {
    DimProblem p = random_neighborhood_dim(rng, 160);
    p.q_box = int64_t{1} << uniform(rng, 0, 7);
    p.kv_box = int64_t{1} << uniform(rng, 0, 7);
    check_key_tiles(p, KvTileOrigin::aligned);
  }
}

TEST(KeyTiles, FlatCausalAndDenseKeepAlignedTiles) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 200 && !HasFailure(); ++trial) {
    DimProblem p;
    p.extent = uniform(rng, 1, 300);
    p.extent_kv = uniform(rng, 1, 300);
    if (uniform(rng, 0, 2) != 0) {
      p.rule.kind = WindowKind::prefix;
      p.rule.prefix_offset = uniform(rng, 0, 1) == 1 ? p.extent_kv - p.extent : 0;
      p.causal_offset = p.rule.prefix_offset;
    }
    p.q_box = int64_t{1} << uniform(rng, 0, 7);
    p.kv_box = int64_t{1} << uniform(rng, 0, 7);
    check_key_tiles(p, KvTileOrigin::window);
    // Windows that start at key 0 give no reason to move: window mode is the aligned walk.
    for (int64_t q = 0; q < p.extent; q += p.q_box) {
      const int64_t q_last = std::min(q + p.q_box, p.extent) - 1;
      const DimKeyTiles w = dim_key_tiles(p.rule, q, q_last, p.extent_kv, log2_of(p.kv_box), KvTileOrigin::window);
      const DimKeyTiles a = dim_key_tiles(p.rule, q, q_last, p.extent_kv, log2_of(p.kv_box), KvTileOrigin::aligned);
      EXPECT_EQ(w.origin, a.origin);
      EXPECT_EQ(w.count, a.count);
    }
  }
}

TEST(KeyTiles, WindowOf64KeysNeedsTwoTilesOf128FromItsFirstKey) {
  // Q tile [1024, 1152) of L = 8192, K = 64: keys [992, 1183), which meets 3 aligned tiles of 128.
  const WindowRule rule = neighborhood_rule(64);
  const DimKeyTiles a = dim_key_tiles(rule, 1024, 1151, 8192, 7, KvTileOrigin::aligned);
  EXPECT_EQ(a.origin, 896);
  EXPECT_EQ(a.count, 3);
  const DimKeyTiles w = dim_key_tiles(rule, 1024, 1151, 8192, 7, KvTileOrigin::window);
  EXPECT_EQ(w.origin, 992);
  EXPECT_EQ(w.count, 2);
  EXPECT_EQ(w.full_end - w.full_first, 0) << "no key is seen by all 128 queries";
}

TEST(KeyTiles, TilesNearTheEndOfTheGridEndAtTheExtent) {
  // L = 1100, K = 64, Q tiles of 128: windows clamp at the end of the grid.
  const WindowRule rule = neighborhood_rule(64);
  // Q [768, 896): keys [736, 927), 2 tiles from the window's first key.
  const DimKeyTiles early = dim_key_tiles(rule, 768, 895, 1100, 7, KvTileOrigin::window);
  EXPECT_EQ(early.origin, 736);
  EXPECT_EQ(early.count, 2);
  // Q [896, 1024): keys [864, 1055), 2 tiles, moved back so that the last one ends at key 1100.
  const DimKeyTiles late = dim_key_tiles(rule, 896, 1023, 1100, 7, KvTileOrigin::window);
  EXPECT_EQ(late.origin, 844);
  EXPECT_EQ(late.count, 2);
  // Q [1024, 1100): keys [992, 1100), one tile [972, 1100) instead of the aligned [896, 1024), [1024, 1152).
  const DimKeyTiles last = dim_key_tiles(rule, 1024, 1099, 1100, 7, KvTileOrigin::window);
  EXPECT_EQ(last.origin, 972);
  EXPECT_EQ(last.count, 1);
}

TEST(KeyTiles, FirstTileOfTheGridStartsAtKeyZero) {
  const DimKeyTiles t = dim_key_tiles(neighborhood_rule(64), 0, 127, 8192, 7, KvTileOrigin::window);
  EXPECT_EQ(t.origin, 0);
  EXPECT_EQ(t.count, 2);  // keys [0, 160)
}

TEST(KeyTiles, CausalWindowKeepsTheTilesItNeeds) {
  // K = 256 causal, Q tile [1024, 1152): keys [769, 1152), 383 keys: 3 tiles either way (aligned kept).
  const WindowRule rule = neighborhood_rule(256, true);
  const DimKeyTiles w = dim_key_tiles(rule, 1024, 1151, 8192, 7, KvTileOrigin::window);
  EXPECT_EQ(w.origin, 768);
  EXPECT_EQ(w.count, 3);
  // A causal union ends at the Q tile's end, aligned when Q boxes are multiples of KV boxes; with Q
  // boxes of 8 and KV boxes of 16, K = 100, Q tile [1008, 1016): keys [909, 1016), 7 tiles from 909
  // instead of the 8 aligned ones [896, 1024).
  const DimKeyTiles u = dim_key_tiles(neighborhood_rule(100, true), 1008, 1015, 4096, 4, KvTileOrigin::window);
  EXPECT_EQ(u.origin, 909);
  EXPECT_EQ(u.count, 7);
}

TEST(KeyTiles, DilationGroupsUseGroupIndices) {
  // L = 1000, dilation 3: group 1 holds 333 indices; K = 64 over indices, Q tile of indices [128, 256):
  // keys [96, 287), 2 tiles instead of 3, ending at index 333 (origin 77).
  const int64_t n = detail::dilation_group_size(1000, 3, 1);
  ASSERT_EQ(n, 333);
  const DimKeyTiles t = dim_key_tiles(neighborhood_rule(64), 128, 255, n, 7, KvTileOrigin::window);
  EXPECT_EQ(t.origin, 77);
  EXPECT_EQ(t.count, 2);
  DimProblem p;
  p.extent = p.extent_kv = 1000;
  p.dilation = 3;
  p.rule = neighborhood_rule(64);
  p.q_box = p.kv_box = 128;
  EXPECT_GT(check_key_tiles(p, KvTileOrigin::window), 0);
}

TEST(KeyTiles, QueryTileThatSeesNoKeyVisitsNothing) {
  WindowRule rule;
  rule.kind = WindowKind::prefix;
  rule.prefix_offset = 50 - 200;  // bottom-right, Sq = 200 > Sk = 50
  for (const KvTileOrigin mode : {KvTileOrigin::aligned, KvTileOrigin::window}) {
    const DimKeyTiles t = dim_key_tiles(rule, 64, 127, 50, 4, mode);
    EXPECT_EQ(t.count, 0);
    EXPECT_EQ(t.full_end - t.full_first, 0);
  }
}

TEST(KeyTiles, LargeWindowsKeepTheirFullTiles) {
  // K = 1024, boxes of 128: Q tile [2048, 2176) needs keys [1536, 2687): 9 tiles either way, and the
  // tiles inside the intersection [1663, 2560) stay full.
  const DimKeyTiles t = dim_key_tiles(neighborhood_rule(1024), 2048, 2175, 8192, 7, KvTileOrigin::window);
  EXPECT_EQ(t.count, 9);
  EXPECT_EQ(t.origin, 1536);
  EXPECT_EQ(t.full_first, 1);  // [1664, 1792) is the first tile inside the intersection
  EXPECT_EQ(t.full_end, 8);
}

}  // namespace
}  // namespace attnkit::cuda
