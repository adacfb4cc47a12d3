#include "cuda/fmha/fmha_box_shape.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <vector>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range_inverse.hpp"

namespace attnkit::cuda::fmha {
namespace {

constexpr double kPartialTileWeight = 0.25;  // extra cost of masking a partial tile, relative to a tile
constexpr int kMaxLog2 = 8;

struct DimCost {
  double visited = 0;
  double full = 0;
};

// Sum over the Q tiles of one group of n indices.
DimCost group_cost(int64_t n, const WindowRule& rule, int q_log2, int kv_log2, KvTileOrigin origins) {
  DimCost c;
  const int64_t q_box = int64_t{1} << q_log2;
  for (int64_t q0 = 0; q0 < n; q0 += q_box) {
    const DimKeyTiles r = dim_key_tiles(rule, q0, std::min(q0 + q_box, n) - 1, n, kv_log2, origins);
    c.visited += static_cast<double>(r.count);
    c.full += static_cast<double>(r.full_end - r.full_first);
  }
  return c;
}

// Groups hold ceil(L/d) or floor(L/d) indices: two distinct sizes at most.
DimCost dim_cost(int64_t extent, int64_t dilation, const WindowRule& rule, int q_log2, int kv_log2,
                 KvTileOrigin origins) {
  const int64_t large = detail::dilation_group_size(extent, dilation, 0);
  const int64_t large_groups = extent % dilation == 0 ? dilation : extent % dilation;
  DimCost total = group_cost(large, rule, q_log2, kv_log2, origins);
  total.visited *= static_cast<double>(large_groups);
  total.full *= static_cast<double>(large_groups);
  if (large_groups < dilation) {
    const DimCost small = group_cost(large - 1, rule, q_log2, kv_log2, origins);
    total.visited += small.visited * static_cast<double>(dilation - large_groups);
    total.full += small.full * static_cast<double>(dilation - large_groups);
  }
  return total;
}

// The backward's dK/dV walk along one dimension: for each Q box extent 2^q (q <= block_m_log2), sums over
// the KV tiles of 2^kv_log2 keys (aligned, one CTA each) of the Q tiles that the CTA visits
// (dim_query_tiles at `origins`), plain and, when the dimension is the one the Hopper kernel halves (the
// KV box's outermost of more than one key), as the two halves count them: each half runs the visits
// that meet its keys (a full visit meets both).
struct BackwardDimCost {
  DimCost plain[kMaxLog2 + 1];
  DimCost halved[kMaxLog2 + 1];
};

void add_backward_group_cost(int64_t n, int64_t weight, const WindowRule& rule, int block_m_log2, int kv_log2,
                             KvTileOrigin origins, BackwardDimCost& cost) {
  const int64_t kv_box = int64_t{1} << kv_log2;
  const int64_t half = kv_box / 2;
  const auto w = static_cast<double>(weight);
  for (int64_t k0 = 0; k0 < n; k0 += kv_box) {
    int64_t bound[kInverseBounds];
    int64_t half_bound[2][2];
    for (int b = 0; b < kInverseBounds; ++b) bound[b] = inverse_bound(rule, b, k0, k0 + kv_box - 1, n, n);
    for (int h = 0; h < 2 && half > 0; ++h) {
      for (int b = 0; b < 2; ++b)
        half_bound[h][b] = inverse_bound(rule, b, k0 + h * half, k0 + (h + 1) * half - 1, n, n);
    }
    for (int q = 0; q <= block_m_log2; ++q) {
      const DimKeyTiles t = dim_query_tiles_of_bounds(bound, n, q, origins);
      const auto full = static_cast<double>(t.full_end - t.full_first);
      cost.plain[q].visited += w * static_cast<double>(t.count);
      cost.plain[q].full += w * full;
      if (half == 0 || t.count == 0) continue;
      for (int h = 0; h < 2; ++h) {
        if (half_bound[h][1] <= half_bound[h][0]) continue;
        const int64_t first = std::max<int64_t>(floor_shift(half_bound[h][0] - t.origin, q), 0);
        const int64_t end = std::min<int64_t>(ceil_shift(half_bound[h][1] - t.origin, q), t.count);
        cost.halved[q].visited += w * static_cast<double>(std::max<int64_t>(end - first, 0));
        cost.halved[q].full += w * full;
      }
    }
  }
}

BackwardDimCost backward_dim_cost(int64_t extent, int64_t dilation, const WindowRule& rule, int block_m_log2,
                                  int kv_log2, KvTileOrigin origins) {
  BackwardDimCost cost;
  const int64_t large = detail::dilation_group_size(extent, dilation, 0);
  const int64_t large_groups = extent % dilation == 0 ? dilation : extent % dilation;
  add_backward_group_cost(large, large_groups, rule, block_m_log2, kv_log2, origins, cost);
  if (large_groups < dilation) {
    add_backward_group_cost(large - 1, dilation - large_groups, rule, block_m_log2, kv_log2, origins, cost);
  }
  return cost;
}

bool same_rule(const WindowRule& a, const WindowRule& b) {
  return a.kind == b.kind && a.window == b.window && a.stride == b.stride && a.causal == b.causal &&
         a.prefix_offset == b.prefix_offset;
}

bool same_geometry(const BoxGeometry& a, const BoxGeometry& b) {
  if (a.dims != b.dims) return false;
  for (int d = 0; d < a.dims; ++d) {
    if (a.extent[d] != b.extent[d] || a.dilation[d] != b.dilation[d] || !same_rule(a.rule[d], b.rule[d])) return false;
  }
  return true;
}

struct CacheEntry {
  BoxGeometry geometry;
  int block_m_log2;
  int block_n_log2;
  bool kv_halves;
  KvTileOrigin origins;
  bool backward;
  BoxShapes shapes;
};

// The half of a KV box that one of two consumers owns: the box halved along its outermost dimension
// of more than one key (rows 0 .. N/2 - 1 and N/2 .. N - 1 of the box, last dimension fastest).
std::array<int, 3> half_of(std::array<int, 3> k, int dims) {
  for (int d = 0; d < dims; ++d) {
    if (k[d] > 0) {
      --k[d];
      break;
    }
  }
  return k;
}

// Every way to split 2^total into power-of-two extents over `dims` dimensions.
std::vector<std::array<int, 3>> exponent_splits(int dims, int total) {
  std::vector<std::array<int, 3>> splits;
  if (dims == 1) {
    splits.push_back({total, 0, 0});
  } else if (dims == 2) {
    for (int a = 0; a <= total; ++a) splits.push_back({a, total - a, 0});
  } else {
    for (int a = 0; a <= total; ++a) {
      for (int b = 0; a + b <= total; ++b) splits.push_back({a, b, total - a - b});
    }
  }
  return splits;
}

// The cheapest split: cost(d, q, k, halved) gives dimension d's sums for box extents 2^q (queries) and 2^k
// (keys), halved when the two halves of the KV box along d are scored.
template <class CostOf>
BoxShapes cheapest_split(const BoxGeometry& g, int block_m_log2, int block_n_log2, bool kv_halves,
                         const CostOf& cost_of) {
  BoxShapes best;
  double best_cost = std::numeric_limits<double>::infinity();
  int best_spread = std::numeric_limits<int>::max();
  for (const auto& q : exponent_splits(g.dims, block_m_log2)) {
    for (const auto& k : exponent_splits(g.dims, block_n_log2)) {
      // Scored by the tiles (or half tiles) that hold work.
      const std::array<int, 3> halved = kv_halves ? half_of(k, g.dims) : k;
      double visited = 1;
      double full = 1;
      int lo = kMaxLog2;
      int hi = 0;
      for (int d = 0; d < g.dims; ++d) {
        const DimCost& c = cost_of(d, q[d], k[d], halved[d] != k[d]);
        visited *= c.visited;
        full *= c.full;
        lo = std::min({lo, q[d], k[d]});
        hi = std::max({hi, q[d], k[d]});
      }
      const double total = visited + kPartialTileWeight * (visited - full);
      const int spread = hi - lo;
      if (total < best_cost * (1 - 1e-9) || (total <= best_cost * (1 + 1e-9) && spread < best_spread)) {
        best_cost = total;
        best_spread = spread;
        best.q_log2 = q;
        best.kv_log2 = k;
      }
    }
  }
  return best;
}

BoxShapes choose_uncached(const BoxGeometry& g, int block_m_log2, int block_n_log2, bool kv_halves,
                          KvTileOrigin origins) {
  // cost[d][q][k] for box extents 2^q (queries) and 2^k (keys) along dimension d; a half KV box is a box
  // of 2^(k - 1) keys for the forward's walk.
  DimCost cost[3][kMaxLog2 + 1][kMaxLog2 + 1];
  for (int d = 0; d < g.dims; ++d) {
    for (int q = 0; q <= block_m_log2; ++q) {
      for (int k = 0; k <= block_n_log2; ++k)
        cost[d][q][k] = dim_cost(g.extent[d], g.dilation[d], g.rule[d], q, k, origins);
    }
  }
  return cheapest_split(
      g, block_m_log2, block_n_log2, kv_halves,
      [&](int d, int q, int k, bool halved) -> const DimCost& { return cost[d][q][halved ? k - 1 : k]; });
}

BoxShapes choose_backward_uncached(const BoxGeometry& g, int block_m_log2, int block_n_log2, bool kv_halves,
                                   KvTileOrigin q_origins) {
  std::vector<BackwardDimCost> cost(static_cast<size_t>(3 * (kMaxLog2 + 1)));
  for (int d = 0; d < g.dims; ++d) {
    // One dimension has one split: only the whole KV tile's sums (one binary search per bound and KV tile:
    // long 1-D sequences would pay for every smaller box too).
    for (int k = g.dims == 1 ? block_n_log2 : 0; k <= block_n_log2; ++k) {
      cost[static_cast<size_t>(d * (kMaxLog2 + 1) + k)] =
          backward_dim_cost(g.extent[d], g.dilation[d], g.rule[d], block_m_log2, k, q_origins);
    }
  }
  return cheapest_split(g, block_m_log2, block_n_log2, kv_halves,
                        [&](int d, int q, int k, bool halved) -> const DimCost& {
                          const BackwardDimCost& c = cost[static_cast<size_t>(d * (kMaxLog2 + 1) + k)];
                          return halved ? c.halved[q] : c.plain[q];
                        });
}

BoxShapes cached_shapes(const BoxGeometry& geometry, int block_m_log2, int block_n_log2, bool kv_halves,
                        KvTileOrigin origins, bool backward) {
  static std::mutex mutex;
  static std::vector<CacheEntry> cache;
  constexpr std::size_t kCacheSize = 64;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& e : cache) {
      if (e.block_m_log2 == block_m_log2 && e.block_n_log2 == block_n_log2 && e.kv_halves == kv_halves &&
          e.origins == origins && e.backward == backward && same_geometry(e.geometry, geometry)) {
        return e.shapes;
      }
    }
  }
  const BoxShapes shapes = backward ? choose_backward_uncached(geometry, block_m_log2, block_n_log2, kv_halves, origins)
                                    : choose_uncached(geometry, block_m_log2, block_n_log2, kv_halves, origins);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= kCacheSize) cache.erase(cache.begin());
  cache.push_back({geometry, block_m_log2, block_n_log2, kv_halves, origins, backward, shapes});
  return shapes;
}

}  // namespace

BoxGeometry neighborhood_geometry(int dims, const std::array<NeighborhoodDim, kMaxTokenDims>& neighborhood,
                                  const std::array<int64_t, kMaxTokenDims>& extents) {
  BoxGeometry geometry;
  geometry.dims = dims;
  for (int d = 0; d < dims; ++d) {
    const auto i = static_cast<size_t>(d);
    const NeighborhoodDim& nd = neighborhood[i];
    geometry.extent[i] = extents[i];
    geometry.dilation[i] = nd.dilation;
    geometry.rule[i].kind = WindowKind::neighborhood;
    geometry.rule[i].window = static_cast<int32_t>(nd.kernel_size);
    geometry.rule[i].stride = static_cast<int32_t>(nd.stride);
    geometry.rule[i].causal = nd.causal;
  }
  return geometry;
}

BoxShapes choose_box_shapes(const BoxGeometry& geometry, int block_m_log2, int block_n_log2, bool kv_halves,
                            KvTileOrigin origins) {
  return cached_shapes(geometry, block_m_log2, block_n_log2, kv_halves, origins, false);
}

BoxShapes choose_backward_box_shapes(const BoxGeometry& geometry, int block_m_log2, int block_n_log2, bool kv_halves,
                                     KvTileOrigin q_origins) {
  // Aligned Q tiles visit the same (Q tile, KV tile) pairs as the forward's aligned walk: its shapes, as before.
  if (q_origins == KvTileOrigin::aligned)
    return choose_box_shapes(geometry, block_m_log2, block_n_log2, kv_halves, q_origins);
  return cached_shapes(geometry, block_m_log2, block_n_log2, kv_halves, q_origins, true);
}

BoxVisitCounts count_box_visits(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins) {
  BoxVisitCounts counts{1, 1};
  for (int d = 0; d < g.dims; ++d) {
    const DimCost c = dim_cost(g.extent[d], g.dilation[d], g.rule[d], s.q_log2[d], s.kv_log2[d], origins);
    counts.visited *= c.visited;
    counts.full *= c.full;
  }
  return counts;
}

BoxVisitCounts count_backward_box_visits(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin q_origins,
                                         bool kv_halves) {
  const std::array<int, 3> halved = kv_halves ? half_of(s.kv_log2, g.dims) : s.kv_log2;
  BoxVisitCounts counts{1, 1};
  for (int d = 0; d < g.dims; ++d) {
    const BackwardDimCost c =
        backward_dim_cost(g.extent[d], g.dilation[d], g.rule[d], s.q_log2[d], s.kv_log2[d], q_origins);
    const DimCost& dim = halved[d] != s.kv_log2[d] ? c.halved[s.q_log2[d]] : c.plain[s.q_log2[d]];
    counts.visited *= dim.visited;
    counts.full *= dim.full;
  }
  return counts;
}

}  // namespace attnkit::cuda::fmha
