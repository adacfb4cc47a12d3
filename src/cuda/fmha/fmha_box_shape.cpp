#include "cuda/fmha/fmha_box_shape.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <vector>

#include "core/neighborhood_window.hpp"

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

BoxShapes choose_uncached(const BoxGeometry& g, int block_m_log2, int block_n_log2, bool kv_halves,
                          KvTileOrigin origins) {
  // cost[d][q][k] for box extents 2^q (queries) and 2^k (keys) along dimension d.
  DimCost cost[3][kMaxLog2 + 1][kMaxLog2 + 1];
  for (int d = 0; d < g.dims; ++d) {
    for (int q = 0; q <= block_m_log2; ++q) {
      for (int k = 0; k <= block_n_log2; ++k)
        cost[d][q][k] = dim_cost(g.extent[d], g.dilation[d], g.rule[d], q, k, origins);
    }
  }
  BoxShapes best;
  double best_cost = std::numeric_limits<double>::infinity();
  int best_spread = std::numeric_limits<int>::max();
  for (const auto& q : exponent_splits(g.dims, block_m_log2)) {
    for (const auto& k : exponent_splits(g.dims, block_n_log2)) {
      // Scored by the tiles (or half tiles) that hold work.
      const std::array<int, 3> scored = kv_halves ? half_of(k, g.dims) : k;
      double visited = 1;
      double full = 1;
      int lo = kMaxLog2;
      int hi = 0;
      for (int d = 0; d < g.dims; ++d) {
        visited *= cost[d][q[d]][scored[d]].visited;
        full *= cost[d][q[d]][scored[d]].full;
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
  static std::mutex mutex;
  static std::vector<CacheEntry> cache;
  constexpr std::size_t kCacheSize = 64;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& e : cache) {
      if (e.block_m_log2 == block_m_log2 && e.block_n_log2 == block_n_log2 && e.kv_halves == kv_halves &&
          e.origins == origins && same_geometry(e.geometry, geometry)) {
        return e.shapes;
      }
    }
  }
  const BoxShapes shapes = choose_uncached(geometry, block_m_log2, block_n_log2, kv_halves, origins);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= kCacheSize) cache.erase(cache.begin());
  cache.push_back({geometry, block_m_log2, block_n_log2, kv_halves, origins, shapes});
  return shapes;
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

}  // namespace attnkit::cuda::fmha
