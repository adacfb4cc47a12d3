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
// dim_key_tiles (below) lists the same walk in key indices and lets the tiles start at any key
// (KvTileOrigin::window, the forward): the statements above hold for its tiles too.
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

// Where the KV tiles a Q tile visits start, per dimension.
//   aligned  tiles at multiples of the KV box, as dim_tile_range lists them (the backward's dK/dV CTAs
//            own fixed aligned KV boxes, and the fixed dQ order of deterministic mode follows
//            dim_tile_range; the Q tiles a dK/dV CTA visits take either mode, dim_query_tiles in
//            tile_range_inverse.hpp);
//   window   the forward and the dQ kernel's walk (QBoxSchedule): when the union of the windows fits in fewer boxes
//   than the aligned tiles
//            that meet it, the tiles start at the union's first key instead (moved back towards 0 so
//            that the last tile ends at n_kv when the union lies near the end), e.g. a window of 64
//            keys and boxes of 128: a Q tile [i, i + 128) needs keys [i - 32, i + 160), 2 boxes from
//            i - 32 instead of the 3 aligned boxes that meet it. Otherwise (no fewer tiles) aligned.
// Either way every visited tile starts inside the union (so holds an attended pair, see above), the
// tiles cover the union, and fullness is exact: a tile is full iff it lies inside the intersection.
enum class KvTileOrigin : int32_t { aligned = 0, window = 1 };

// The KV tiles of one dimension as key indices: tile j < count holds the keys
// [origin + j * kv_box, origin + (j + 1) * kv_box) (keys past n_kv are outside every window), and
// tiles full_first <= j < full_end are full. count == 0 when no query of the Q tile sees any key.
struct DimKeyTiles {
  int64_t origin = 0;
  int64_t count = 0;
  int64_t full_first = 0;
  int64_t full_end = 0;
};

// floor(x / 2^log2) and ceil(x / 2^log2) for any sign of x (right shifts of negative values are
// arithmetic in C++20 and on the device).
ATTNKIT_HOST_DEVICE int64_t floor_shift(int64_t x, int log2) { return x >> log2; }
ATTNKIT_HOST_DEVICE int64_t ceil_shift(int64_t x, int log2) { return -((-x) >> log2); }

// The KV tiles of one dimension for a Q tile whose query indices are [q_first, q_last] (q_first <=
// q_last, all valid), KV boxes of 2^kv_box_log2 keys, origins as `mode` says.
ATTNKIT_HOST_DEVICE DimKeyTiles dim_key_tiles(const WindowRule& rule, int64_t q_first, int64_t q_last, int64_t n_kv,
                                              int kv_box_log2, KvTileOrigin mode) {
  const detail::IndexRange lo = window_of(rule, q_first, n_kv);
  const detail::IndexRange hi = window_of(rule, q_last, n_kv);
  DimKeyTiles t;
  // Union [lo.begin, hi.end): empty only if even the last query sees nothing (a prefix rule).
  if (hi.end <= lo.begin) return t;
  const int64_t aligned_first = floor_shift(lo.begin, kv_box_log2);
  t.count = ceil_shift(hi.end, kv_box_log2) - aligned_first;
  t.origin = aligned_first << kv_box_log2;
  if (mode == KvTileOrigin::window) {
    const int64_t count = ceil_shift(hi.end - lo.begin, kv_box_log2);
    if (count < t.count) {
      // The origin whose last tile ends at n_kv; positive, since fewer tiles than the aligned ones
      // (at most ceil(n_kv / kv_box) of them) hold fewer than n_kv keys.
      const int64_t last_fit = n_kv - (count << kv_box_log2);
      t.count = count;
      t.origin = lo.begin < last_fit ? lo.begin : last_fit;
    }
  }
  // Full tiles: inside the intersection [hi.begin, lo.end) (never past n_kv, since lo.end <= n_kv).
  if (lo.end > hi.begin) {
    t.full_first = ceil_shift(hi.begin - t.origin, kv_box_log2);
    t.full_end = floor_shift(lo.end - t.origin, kv_box_log2);
  }
  if (t.full_first < 0) t.full_first = 0;
  if (t.full_end > t.count) t.full_end = t.count;
  if (t.full_end < t.full_first) t.full_end = t.full_first;
  return t;
}

}  // namespace attnkit::cuda
