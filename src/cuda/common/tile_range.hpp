// Tile-range math of the box-tiled attention kernels, shared by the GPU kernels (per Q tile, on the
// device) and their CPU unit tests.
//
// A mask is described per token dimension by a WindowRule that gives, for a query with index i, the
// half-open range of key indices it attends in that dimension (DESIGN §3):
//   dense         [0, n_kv)                                       (no mask, or a dimension a mask leaves free)
//   prefix        [0, clamp(i + 1 + offset, 0, n_kv))             (flat causal; offset 0 = top_left,
//                                                                  Sk - Sq = bottom_right)
//   neighborhood  detail::neighborhood_window(i, n, w, s, causal) (indices inside one dilation group)
// A query attends a key iff the key lies in its window in every dimension.
//
// Tiles are boxes: a Q tile covers an index box [q_first, q_last] per dimension and a KV tile the index
// box [t*kv_box, (t+1)*kv_box) per dimension. Every rule above has window begin and end that never
// decrease as the query index grows, and windows of neighbouring queries overlap or touch. Hence, per
// dimension, over the queries of a Q tile:
//   union        = [begin(q_first), end(q_last))  — contiguous, every index in it is seen by some query;
//   intersection = [begin(q_last),  end(q_first)) — the indices every query sees.
// The KV tiles visited are the box of tiles that meet the union in every dimension; a tile is FULL
// (needs no element masking) iff, in every dimension, it lies inside the intersection. Because the Q
// tile is a box (a product of per-dimension index sets), a KV tile that meets the union in every
// dimension holds at least one (query, key) pair that is attended: no visited tile is empty. A tile
// whose keys leave the extents is never full, since windows never leave [0, n_kv).
#pragma once
#include <cstdint>

#include "core/host_device.hpp"
#include "core/neighborhood_window.hpp"

namespace attnkit::cuda {

enum class WindowKind : int32_t { dense = 0, prefix = 1, neighborhood = 2 };

struct WindowRule {
  WindowKind kind = WindowKind::dense;
  int32_t window = 1;         // neighborhood: kernel size w
  int32_t stride = 1;         // neighborhood: stride s
  bool causal = false;        // neighborhood: causal in this dimension
  int64_t prefix_offset = 0;  // prefix: query i sees keys [0, i + 1 + prefix_offset)
};

// Keys (indices) that query index i sees. n_q / n_kv: number of query / key indices in this dimension
// (for a neighborhood, the size of the dilation group; queries and keys share it). The range is empty
// (begin >= end) when the query sees nothing, which only a bottom-right prefix with Sq > Sk produces.
ATTNKIT_HOST_DEVICE detail::IndexRange window_of(const WindowRule& rule, int64_t i, int64_t n_kv) {
  switch (rule.kind) {
    case WindowKind::prefix: {
      int64_t end = i + 1 + rule.prefix_offset;
      end = end < 0 ? 0 : (end > n_kv ? n_kv : end);
      return {0, end};
    }
    case WindowKind::neighborhood: return detail::neighborhood_window(i, n_kv, rule.window, rule.stride, rule.causal);
    case WindowKind::dense:
    default: return {0, n_kv};
  }
}

ATTNKIT_HOST_DEVICE int64_t ceil_div_nonneg(int64_t a, int64_t b) { return (a + b - 1) / b; }

// KV tiles of one dimension for a Q tile whose query indices are [q_first, q_last] (q_first <= q_last,
// all valid): visited tiles [first, end) and, inside them, the full tiles [full_first, full_end)
// (full_first >= full_end when none). first == end when no query of the tile sees any key.
struct DimTileRange {
  int64_t first = 0;
  int64_t end = 0;
  int64_t full_first = 0;
  int64_t full_end = 0;
};

ATTNKIT_HOST_DEVICE DimTileRange dim_tile_range(const WindowRule& rule, int64_t q_first, int64_t q_last, int64_t n_kv,
                                                int64_t kv_box) {
  const detail::IndexRange lo = window_of(rule, q_first, n_kv);
  const detail::IndexRange hi = window_of(rule, q_last, n_kv);
  DimTileRange r;
  // Union [lo.begin, hi.end): empty only if even the last query sees nothing (a prefix rule, where begin = 0).
  if (hi.end <= lo.begin) return r;
  r.first = lo.begin / kv_box;
  r.end = ceil_div_nonneg(hi.end, kv_box);
  // Intersection [hi.begin, lo.end).
  if (lo.end > hi.begin) {
    r.full_first = ceil_div_nonneg(hi.begin, kv_box);
    r.full_end = lo.end / kv_box;
  }
  if (r.full_first < r.first) r.full_first = r.first;
  if (r.full_end > r.end) r.full_end = r.end;
  if (r.full_end < r.full_first) r.full_end = r.full_first;
  return r;
}

ATTNKIT_HOST_DEVICE bool tile_is_full(const DimTileRange& r, int64_t tile) {
  return tile >= r.full_first && tile < r.full_end;
}

}  // namespace attnkit::cuda
