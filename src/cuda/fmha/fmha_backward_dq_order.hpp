// The fixed order of the dQ additions in the Hopper backward's deterministic mode (ordered_dq,
// fmha_backward_params.hpp), shared by the dK/dV kernel, the launcher and the CPU unit tests.
//
// Every dK/dV CTA adds its partial dQ = dS K of each visit into the fp32 accumulator rows of the visit's
// Q tile (one TMA reduction per MMA warpgroup and 32-column box). Fast mode lets those additions land in
// whatever order the CTAs reach them; here the KV tiles that meet a Q tile (its "visitors": per dimension
// the forward's tile range dim_tile_range, the transpose of the schedule's dim_tile_range_inverse) take
// turns, so every accumulator element sees the same sequence of fp32 additions in every run. A counter
// per (batch, query head, Q tile) holds the turns taken; the visitor of rank r adds its two warpgroups'
// partials as turns 2r and 2r + 1, each once the counter reads its turn, and passes the turn on once
// the reduction has completed.
//
// The order: visitors by descending box position, the last token dimension most significant. A KV
// tile's schedule walks its Q tiles as an odometer with the first dimension fastest, so a visitor of
// higher position reaches a shared Q tile at an earlier step of its own walk (its window range starts
// further on): in the steady state every turn's predecessor has taken it a step before, and a CTA never
// waits for one that is behind it. Dense and causal 1-D problems: the higher KV tile first; dense rows
// reach a Q tile at the same step, so the visitors of a head add one after another (a start-up skew of
// one turn per KV tile, measured in docs/perf.md).
//
// No deadlock: the dK/dV grid launches the KV tiles of each (batch, KV head) in that same descending order
// (KvTileOrder::descending, descending_launch_position), so a CTA only ever waits for CTAs that were
// launched before it. CTAs start in launch order, so those are running or done, and the earliest unfinished
// one waits for nobody. Tile lists (1-D) order the KV tiles of a Q tile's row list the same way
// (descending), their ranks read from a table the list builder fills.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"

namespace attnkit::cuda::fmha {

// Rank of the KV tile at box position `kv` among the visitors of a Q tile, which are the positions
// [first[d], end[d]) per dimension, in descending order with dimension dims - 1 most significant.
ATTNKIT_HOST_DEVICE uint32_t descending_visitor_rank(int dims, const int32_t (&first)[kMaxDims],
                                                     const int32_t (&end)[kMaxDims], const int32_t (&kv)[kMaxDims]) {
  uint32_t rank = 0;
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < dims) rank = rank * static_cast<uint32_t>(end[d] - first[d]) + static_cast<uint32_t>(end[d] - 1 - kv[d]);
  }
  return rank;
}

// The turn of MMA warpgroup `group` (of the kernel's `groups`: 1 or 2) of the visitor of rank `rank`: its
// warpgroups add their partials one after the other. A warpgroup whose half of a partial box visit meets none of the Q
// tile's windows adds nothing but still takes its turn (letting the other warpgroup take both measured no faster on the
// neighborhood rows of docs/perf.md, and a skipping warpgroup must pass its previous turn on anyway, as the other may
// wait for it).
ATTNKIT_HOST_DEVICE uint32_t warpgroup_turn(uint32_t rank, int group, int groups) {
  return static_cast<uint32_t>(groups) * rank + static_cast<uint32_t>(group);
}

// Box position of the x-th KV tile of a dilation group to launch: the descending order of
// descending_visitor_rank, positions 0 <= x < prod(tiles).
ATTNKIT_HOST_DEVICE void descending_launch_position(int32_t x, const int32_t (&tiles)[kMaxDims],
                                                    int32_t (&position)[kMaxDims]) {
  for (int d = 0; d < kMaxDims; ++d) {
    position[d] = tiles[d] - 1 - x % tiles[d];
    x /= tiles[d];
  }
}

// The KV tile positions along dimension d that meet the Q tile whose first query index is q_first (n_q /
// n_kv indices in its dilation group): dim_tile_range's first and end — the window begin of the tile's
// first query and the window end of its last existing query, in KV tiles.
ATTNKIT_HOST_DEVICE VisitorBounds visitor_bounds_of(const FmhaBackwardParams& p, int d, int64_t q_first, int64_t n_q,
                                                    int64_t n_kv) {
  const int64_t kv_box = int64_t{1} << p.kv_space.box_log2[d];
  const int64_t q_end = q_first + (int64_t{1} << p.q_space.box_log2[d]);
  const int64_t q_last = (q_end < n_q ? q_end : n_q) - 1;
  return VisitorBounds{static_cast<int32_t>(window_of(p.rule[d], q_first, n_kv).begin / kv_box),
                       static_cast<int32_t>(ceil_div_nonneg(window_of(p.rule[d], q_last, n_kv).end, kv_box))};
}

// The box policies' table of both bounds per (dimension, dilation group, Q tile position), filled once per
// call (fmha_backward_visitor_bounds_kernel, fmha_backward_dq_order.cuh) so that a visit's rank costs a
// load per dimension: entries of dimension d follow those of the dimensions before it, group-major.
ATTNKIT_HOST_DEVICE int64_t visitor_bounds_index(const FmhaBackwardParams& p, int d, int32_t group, int32_t position) {
  int64_t offset = 0;
  for (int e = 0; e < kMaxDims; ++e) {
    if (e < d) offset += int64_t{p.dilation[e]} * p.q_tiles[e];
  }
  return offset + int64_t{group} * p.q_tiles[d] + position;
}

ATTNKIT_HOST_DEVICE int64_t visitor_bounds_count(const FmhaBackwardParams& p) {
  int64_t count = 0;
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < p.dims) count += int64_t{p.dilation[d]} * p.q_tiles[d];
  }
  return count;
}

// Rank of a box-policy visit: the Q tile whose first indices are q_first (a dilation group of n_q / n_kv
// indices per dimension) seen from the KV tile at box position kv_position — what the kernel reads from
// the table of visitor_bounds_of.
ATTNKIT_HOST_DEVICE uint32_t box_visit_rank(const FmhaBackwardParams& p, const int32_t (&q_first)[kMaxDims],
                                            const int32_t (&n_q)[kMaxDims], const int32_t (&n_kv)[kMaxDims],
                                            const int32_t (&kv_position)[kMaxDims]) {
  int32_t first[kMaxDims] = {0, 0, 0};
  int32_t end[kMaxDims] = {1, 1, 1};
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < p.dims) {
      const VisitorBounds b = visitor_bounds_of(p, d, q_first[d], n_q[d], n_kv[d]);
      first[d] = b.first;
      end[d] = b.end;
    }
  }
  return descending_visitor_rank(p.dims, first, end, kv_position);
}

// Linear KV tile index (group-major, last dimension fastest) of the x-th CTA rank of the descending
// launch order over groups * prod(tiles) tiles.
ATTNKIT_HOST_DEVICE int32_t descending_launch_tile(int32_t x, const int32_t (&tiles)[kMaxDims]) {
  const int32_t positions = tiles[0] * tiles[1] * tiles[2];
  int32_t position[kMaxDims];
  descending_launch_position(x % positions, tiles, position);
  return (x / positions) * positions + (position[0] * tiles[1] + position[1]) * tiles[2] + position[2];
}

}  // namespace attnkit::cuda::fmha
