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
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"

namespace attnkit::cuda {
namespace {

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

}  // namespace
}  // namespace attnkit::cuda
