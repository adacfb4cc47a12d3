// The inverse of dim_tile_range (tile_range.hpp): for a KV tile, which Q tiles meet it. Used by the
// KV-tile-centric backward kernel (dK, dV), on the device per CTA, and by its CPU unit tests.
//
// Per dimension, a query i sees the keys [begin(i), end(i)) of its WindowRule, and begin and end never
// decrease as i grows. For a KV tile holding the key indices [k_first, k_last]:
//   queries seeing SOME key: begin(i) <= k_last and end(i) > k_first — the intersection of a prefix of
//                            the queries (begin non-decreasing) and a suffix (end non-decreasing), hence
//                            one contiguous range;
//   queries seeing EVERY key: begin(i) <= k_first and end(i) > k_last — contiguous for the same reason
//                            (empty when k_last >= n_kv: windows never leave [0, n_kv)).
// Both ends are found by binary search over the queries (O(log n_q) window evaluations). The Q tiles
// visited are those that meet the first range; a Q tile is FULL (no element masking) when every one of
// its queries that exists (index < n_q) lies in the second range. Queries past n_q may be counted as
// seen because the backward gives such rows zero weight (their LSE is treated as +inf), whereas keys
// past n_kv are never inside a window, so a KV tile that crosses the extent has no full Q tile. As for
// the forward, a Q tile that meets the first range in every dimension holds at least one attended
// (query, key) pair, so no visited tile is empty. dim_query_tiles (below) lists the same walk in query
// indices and lets the Q tiles start at any query (KvTileOrigin::window, the dK/dV kernels outside the
// Hopper tier's ordered dQ): the statements above hold for its tiles too.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"

namespace attnkit::cuda {

// First query index in [0, n_q) whose window begin (of_begin) or end exceeds `key` (n_q when none).
ATTNKIT_HOST_DEVICE int64_t first_query_past(const WindowRule& rule, bool of_begin, int64_t key, int64_t n_q,
                                             int64_t n_kv) {
  int64_t lo = 0;
  int64_t hi = n_q;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const detail::IndexRange w = window_of(rule, mid, n_kv);
    if ((of_begin ? w.begin : w.end) > key) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The four query bounds of a KV tile holding key indices [k_first, k_last], one binary search each
// (independent: a device may run them on four threads):
//   0, 1: queries [bound 0, bound 1) see at least one of the keys (every query in it does);
//   2, 3: queries [bound 2, bound 3) see every key.
inline constexpr int kInverseBounds = 4;
ATTNKIT_HOST_DEVICE int64_t inverse_bound(const WindowRule& rule, int bound, int64_t k_first, int64_t k_last,
                                          int64_t n_q, int64_t n_kv) {
  const bool of_begin = bound == 1 || bound == 3;
  const int64_t key = bound == 0 || bound == 3 ? k_first : k_last;
  return first_query_past(rule, of_begin, key, n_q, n_kv);
}

// Q tiles (boxes of q_box query indices) of one dimension from the four bounds: visited [first, end)
// and, inside them, full [full_first, full_end).
ATTNKIT_HOST_DEVICE DimTileRange dim_tile_range_of_bounds(const int64_t (&bound)[kInverseBounds], int64_t n_q,
                                                          int64_t q_box) {
  DimTileRange r;
  if (bound[1] <= bound[0]) return r;
  r.first = bound[0] / q_box;
  r.end = ceil_div_nonneg(bound[1], q_box);
  if (bound[3] > bound[2]) {
    r.full_first = ceil_div_nonneg(bound[2], q_box);
    // The last Q tile may be full though it reaches past n_q: its missing queries carry no weight.
    r.full_end = bound[3] == n_q ? ceil_div_nonneg(n_q, q_box) : bound[3] / q_box;
  }
  if (r.full_first < r.first) r.full_first = r.first;
  if (r.full_end > r.end) r.full_end = r.end;
  if (r.full_end < r.full_first) r.full_end = r.full_first;
  return r;
}

// The Q tiles of one dimension from the four bounds as query indices (the fields of DimKeyTiles, tile_range.hpp:
// tile j < count holds the queries [origin + j * q_box, origin + (j + 1) * q_box), tiles full_first <= j < full_end
// are full), Q boxes of 2^q_box_log2 queries, origins as `mode` says — the same two modes as the forward's KV tiles:
//   aligned  origin a multiple of the Q box: the tiles of dim_tile_range_of_bounds;
//   window   when the queries that see a key of the KV tile, [bound 0, bound 1), fit in fewer boxes than the
//            aligned tiles that meet them, the tiles start at bound 0 instead (moved back so that the last one
//            ends at n_q when the range lies near the end), e.g. keys [128, 256) of a 1-D window of 64 are
//            seen by queries [97, 288): 3 tiles of 64 from 97 instead of the 4 aligned ones from 64.
// Either way every tile starts inside [bound 0, bound 1) (so holds an attended pair), the tiles cover it, and a
// tile is full iff its queries below n_q lie in [bound 2, bound 3). Window tiles never reach past n_q (only
// aligned ones do, whose missing queries carry no weight).
ATTNKIT_HOST_DEVICE DimKeyTiles dim_query_tiles_of_bounds(const int64_t (&bound)[kInverseBounds], int64_t n_q,
                                                          int q_box_log2, KvTileOrigin mode) {
  DimKeyTiles t;
  if (bound[1] <= bound[0]) return t;
  const int64_t aligned_first = floor_shift(bound[0], q_box_log2);
  t.count = ceil_shift(bound[1], q_box_log2) - aligned_first;
  t.origin = aligned_first << q_box_log2;
  if (mode == KvTileOrigin::window) {
    const int64_t count = ceil_shift(bound[1] - bound[0], q_box_log2);
    if (count < t.count) {
      // Positive: fewer tiles than the aligned ones (at most ceil(n_q / q_box)) hold fewer than n_q queries.
      const int64_t last_fit = n_q - (count << q_box_log2);
      t.count = count;
      t.origin = bound[0] < last_fit ? bound[0] : last_fit;
    }
  }
  if (bound[3] > bound[2]) {
    t.full_first = ceil_shift(bound[2] - t.origin, q_box_log2);
    // An aligned last tile may be full though it reaches past n_q: its missing queries carry no weight.
    t.full_end =
        bound[3] == n_q ? ceil_shift(n_q - t.origin, q_box_log2) : floor_shift(bound[3] - t.origin, q_box_log2);
  }
  if (t.full_first < 0) t.full_first = 0;
  if (t.full_end > t.count) t.full_end = t.count;
  if (t.full_end < t.full_first) t.full_end = t.full_first;
  return t;
}

// Q tiles of one dimension for the KV tile holding key indices [k_first, k_first + kv_box), as query indices.
ATTNKIT_HOST_DEVICE DimKeyTiles dim_query_tiles(const WindowRule& rule, int64_t k_first, int64_t kv_box, int64_t n_q,
                                                int64_t n_kv, int q_box_log2, KvTileOrigin mode) {
  const int64_t k_last = k_first + kv_box - 1;
  int64_t bound[kInverseBounds];
  for (int b = 0; b < kInverseBounds; ++b) bound[b] = inverse_bound(rule, b, k_first, k_last, n_q, n_kv);
  return dim_query_tiles_of_bounds(bound, n_q, q_box_log2, mode);
}

// Q tiles of one dimension for the KV tile holding key indices [k_first, k_first + kv_box).
ATTNKIT_HOST_DEVICE DimTileRange dim_tile_range_inverse(const WindowRule& rule, int64_t k_first, int64_t kv_box,
                                                        int64_t n_q, int64_t n_kv, int64_t q_box) {
  const int64_t k_last = k_first + kv_box - 1;
  int64_t bound[kInverseBounds];
  for (int b = 0; b < kInverseBounds; ++b) bound[b] = inverse_bound(rule, b, k_first, k_last, n_q, n_kv);
  return dim_tile_range_of_bounds(bound, n_q, q_box);
}

}  // namespace attnkit::cuda
