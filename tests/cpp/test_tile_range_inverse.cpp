// The inverse tile-range math of the backward's KV-tile-centric kernel (src/cuda/common/tile_range_inverse.hpp),
// checked on the CPU by brute force against the element-wise mask definitions of DESIGN §3: for every
// KV tile of every dilation group, the Q tiles it lists must be exactly those holding an attended
// (query, key) pair, and a Q tile must be full exactly when every existing query of it sees every key
// of the KV tile. Random 1-D problems cover neighborhoods (kernel size, dilation, stride, causal) and
// flat dense / causal masks (top-left and bottom-right, Sq != Sk) with random power-of-two boxes; the
// mask of a multi-dimensional problem is the product of its dimensions, so per-dimension exactness
// carries over. A last test checks that the inverse is the transpose of the forward's dim_tile_range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/common/tile_range_inverse.hpp"

namespace attnkit::cuda {
namespace {

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

}  // namespace
}  // namespace attnkit::cuda
