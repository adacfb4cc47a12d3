// The producer warpgroup of the Hopper backward dK/dV kernel (fmha_sm90_backward_dkdv.cuh): gathers the
// CTA's K and V tiles (once per KV head) and then, for every visit of its split's part of the schedule (all of it
// unless the KV tile is split, fmha_backward_split.hpp), the visit's Q and dO tiles, row
// statistics, dQ row offsets and (tile lists with an element mask, partial visits) key-major mask words
// into the visit's stage, with the visit itself for the MMA
// warpgroups. The K and V copies are the warpgroup's first cp.async group, issued by the kernel before it
// computes the visit schedule.
//
// A visit's row statistics are one 4-byte copy per producer thread (lse_log2 of rows 0..63, then delta),
// each from the workspace row of the grid's Q tile that holds the query: a Q tile at a window origin
// (KvBoxSchedule) spans several of them. (One path for every visit: with a second one, 16-byte copies
// for the grid's tiles, the 24-register producer spilled more.)
// A visit's tiles are gathered in two steps so that each row's address is computed once: every
// producer thread computes the start of one row (Q rows 0..63, then dO rows) into the stage's row
// table, and after a producer barrier all 128 threads copy 16-byte chunks of consecutive rows
// (cp.async, coalesced) into the swizzled GMMA layouts. Rows outside the extents and columns
// past D (Dv for dO) are zero-filled.
//
// Hand-off through mbarriers: stage s is refilled for visit i >= 2 once both MMA warpgroups released
// visit i - 2 (empty[s]), and announced (full[s]) once every producer thread's copies have landed and
// been fenced for the async proxy (the wgmma reads them); the plain stores (offsets, visit)
// are ordered by the arrival's release. K, V and visit 0 are in flight together, K and V announced
// first (kv_full). Visit i + 1 thus loads while the MMA warpgroups work on visit i.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_backward_visit.cuh"
#include "cuda/fmha_sm90/fmha_sm90_backward_mask.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

namespace attnkit::cuda::fmha_sm90 {

// Barrier of the producer warpgroup (the MMA warpgroups use 1..3).
inline constexpr int kBarrierProducer = 4;

// Copies a pair of tiles of `Rows` rows each (Q and dO, or K and V) whose row starts are in `rows` (the
// first tile's rows, then the second's; nullptr: zero-fill) and commits them as one cp.async group.
// This thread copies the 16-byte chunk at column `col` of rows first_row + kRowsPerPass k: the whole
// 8-row periods of the swizzle put pass k at destination + k * kRowsPerPass * kSwizzleBytes bytes (the rows of
// a swizzle atom's column chunk are kSwizzleBytes apart) in the first tile and second_offset bytes further in
// the second; columns from `columns[t]` on are zero-filled.
template <class Traits, int Rows>
__device__ __forceinline__ void copy_tile_pair_from_rows(const typename Traits::Element* const* rows, int first_row,
                                                         int col, uint32_t destination, uint32_t second_offset,
                                                         const int (&columns)[2], const void* fallback) {
  using Element = typename Traits::Element;
  using Copy = typename Traits::ProducerCopy;
  static_assert(Copy::kRowsPerPass % 8 == 0,
                "the GMMA swizzle repeats every 8 rows: passes are a fixed distance apart");
  constexpr uint32_t kPassBytes = Copy::kRowsPerPass * Traits::kSwizzleBytes;
#pragma unroll
  for (int tile = 0; tile < 2; ++tile) {
    const bool col_valid = col < columns[tile];
#pragma unroll
    for (int pass = 0; pass < Rows / Copy::kRowsPerPass; ++pass) {
      const Element* start = rows[tile * Rows + first_row + pass * Copy::kRowsPerPass];
      const bool valid = start != nullptr && col_valid;
      copy_16_bytes_async(destination + tile * second_offset + pass * kPassBytes,
                          valid ? static_cast<const void*>(start + col) : fallback, valid);
    }
  }
  commit_async_copies();
}

// The producer warpgroup's K and V copies, committed as one cp.async group: as for a visit's Q and dO,
// the threads compute the starts of the K rows and the V rows (one each per thread at 128 keys, one of the two
// at 64) into a row table (in the first dQ buffer,
// unused until the MMA warpgroups' first dQ store, long after these copies landed), then after a
// producer barrier copies 16-byte chunks whose shared addresses are compile-time distances apart
// (recomputing each row's token address in every pass kept the MMA warps waiting ~6 % of the na2d
// kernel's time at the barrier after it, ncu).
template <class Traits>
__device__ __forceinline__ void issue_kv_loads(const fmha::FmhaBackwardParams& p, const fmha::DecodedTile& kv,
                                               int32_t batch, int32_t head_kv, typename Traits::SharedStorage& ss,
                                               int ptid, int buffer) {
  using namespace cute;
  using Element = typename Traits::Element;
  using Copy = typename Traits::ProducerCopy;
  constexpr int kBlockN = Traits::kBlockN;
  static_assert((2 * kBlockN) % Traits::kProducerThreads == 0, "whole passes over the K and V rows");
  const Element** rows = ss.kv_rows;
#pragma unroll
  for (int entry = ptid; entry < 2 * kBlockN; entry += Traits::kProducerThreads) {
    const bool is_v = entry >= kBlockN;
    const fmha::TensorAddress& source = is_v ? p.v : p.k;
    rows[entry] = fmha::tile_row_start<Element>(source, batch * source.batch_stride + head_kv * source.head_stride,
                                                p.kv_space, p.dilation, kv.origin, entry % kBlockN);
  }
  named_barrier_sync(kBarrierProducer, Traits::kProducerThreads);  // the row table
  const int col = (ptid % Copy::kChunksPerRow) * 8;
  const int first_row = ptid / Copy::kChunksPerRow;
  Tensor sK = make_tensor(make_smem_ptr(ss.k[buffer]), typename Traits::SmemLayoutKV{});
  copy_tile_pair_from_rows<Traits, kBlockN>(rows, first_row, col, shared_address(&sK(first_row, col)),
                                            shared_address(ss.v[buffer]) - shared_address(ss.k[buffer]),
                                            {p.head_dim, p.head_dim_v}, p.k.data);
}

// `kv_heads` KV heads from head_kv on, in turn (p.heads_per_cta): K and V of the first are the kernel's first
// cp.async group (buffer 0); those of head j + 1 go into buffer (j + 1) % 2 once head j's first visit has gone out and
// the MMA warpgroups stored head j - 1's dK and dV through that buffer (kv_empty), and are announced (kv_full) with the
// next visit.
template <class Traits, bool kLists, class Schedule>
__device__ __forceinline__ void produce_backward_visits(const fmha::FmhaBackwardParams& p, const Sm90DqMap& dq_map,
                                                        const fmha::DecodedTile& kv, int32_t batch, int32_t head_kv,
                                                        int kv_heads, const Schedule& schedule, fmha::VisitRange range,
                                                        typename Traits::SharedStorage& ss, int ptid) {
  using namespace cute;
  using Copy = typename Traits::ProducerCopy;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kChunksPerRow = Copy::kChunksPerRow;
  static_assert(Traits::kProducerThreads == 2 * kBlockM, "one thread per Q row and per dO row");

  // This thread's chunks (copy_tile_pair_from_rows): column `col` of rows first_row + kRowsPerPass k, from
  // first_destination in stage 0's Q tile (dO and stage 1 are whole tiles further).
  const int col = (ptid % kChunksPerRow) * 8;
  const int first_row = ptid / kChunksPerRow;
  Tensor sQ = make_tensor(make_smem_ptr(ss.q[0]), typename Traits::SmemLayoutQ{});
  const uint32_t first_destination = shared_address(&sQ(first_row, col));
  const uint32_t do_offset = shared_address(ss.d_o[0]) - shared_address(ss.q[0]);
  constexpr uint32_t kStageBytes = Traits::kTileBytesQ;

  // A visit in two parts. prepare_visit: what only the producer reads — the visit (kept in its staging
  // slot), the Q / dO row table, the statistics' source and the dQ row offset — computed while the
  // previous visit's copies are in flight and before the stage is free (the MMA warpgroups may still read
  // its tiles, visit, statistics and dQ rows). publish_visit, once the stage is free: those and the copies.
  struct Prepared {
    const float* stats_source;
    int64_t dq_row;
  };
  auto prepare_visit = [&](int i) {
    const int stage = i % Traits::kStages;
    const fmha::QVisit v = schedule.visit(p, range.first + i);
    if (ptid == 0) ss.visits_ahead[stage] = v;
    const bool is_do = ptid >= kBlockM;
    const int row = ptid % kBlockM;
    {
      const fmha::TensorAddress& a = is_do ? p.d_o : p.q;
      const int64_t head_offset = batch * a.batch_stride + v.head * a.head_stride;
      ss.row_table[stage][ptid] = fmha::tile_row_start<Element>(a, head_offset, p.q_space, p.dilation, v.origin, row);
    }
    Prepared prepared;
    prepared.stats_source = fmha::visit_stats_source<kBlockM>(p, batch, v, ptid);
    prepared.dq_row = !is_do && p.accumulate_dq && !dq_map.enabled ? fmha::dq_accum_row_offset(p, batch, v, row) : 0;
    named_barrier_sync(kBarrierProducer, Traits::kProducerThreads);  // the stage's row table is complete
    return prepared;
  };
  auto publish_visit = [&](int i, const Prepared& prepared) {
    const int stage = i % Traits::kStages;
    if (ptid == 0) ss.visits[stage] = ss.visits_ahead[stage];
    fmha::copy_visit_stats<kBlockM>(prepared.stats_source, ss.stats[stage], ptid);
    if (ptid < kBlockM && p.accumulate_dq && !dq_map.enabled) ss.dq_rows[stage][ptid] = prepared.dq_row;
    if constexpr (kLists && Traits::kStagedKeyWords) {  // in the same cp.async group as the tiles
      const fmha::QVisit& v = ss.visits_ahead[stage];
      if (visit_has_key_words(p, v)) {
        copy_visit_key_words(p, batch, v, kv.origin.index[0] + fmha::in_box(p.kv_space, 0, ptid),
                             ss.masks.key_words[stage], ptid);
      }
    }
    copy_tile_pair_from_rows<Traits, kBlockM>(ss.row_table[stage], first_row, col,
                                              first_destination + stage * kStageBytes, do_offset,
                                              {p.head_dim, p.head_dim_v}, p.q.data);
  };
  const int count = range.count;
  if (count > 0) {
    publish_visit(0, prepare_visit(0));
    wait_async_copies<1>();  // K and V (visit 0 may still be in flight)
  } else {
    wait_async_copies<0>();
  }
  fence_generic_to_async_shared();
  barrier_arrive(&ss.kv_full[0]);
  const int per_head = count / kv_heads;  // the same visits for each KV head (box schedules)
  // Head j + 1's K and V, into buffer (j + 1) % 2 once head j - 1's dK and dV have left it.
  auto issue_next_head = [&](int j) {
    const int buffer = (j + 1) % Traits::kKvBuffers;
    if (j > 0) barrier_wait(&ss.kv_empty[buffer], ((j - 1) / Traits::kKvBuffers) & 1);
    issue_kv_loads<Traits>(p, kv, batch, head_kv + j + 1, ss, ptid, buffer);
    return buffer;
  };
  int kv_pending = -1;  // the buffer whose loads the next wait completes (announced with the next visit)
  for (int j = 0; j < kv_heads; ++j) {
    if (per_head == 0 && j + 1 < kv_heads) {
      const int buffer = issue_next_head(j);
      wait_async_copies<0>();
      fence_generic_to_async_shared();
      barrier_arrive(&ss.kv_full[buffer]);
      // Every producer thread has read its rows of ss.kv_rows before the next head's table overwrites them (with
      // visits, a visit's row-table barrier lies between two heads' tables).
      named_barrier_sync(kBarrierProducer, Traits::kProducerThreads);
    }
    for (int i = j * per_head; i < (j + 1) * per_head; ++i) {
      const int stage = i % Traits::kStages;
      const bool more = i + 1 < count;
      Prepared next{};
      if (more) next = prepare_visit(i + 1);  // while visit i's copies are in flight
      wait_async_copies<0>();
      fence_generic_to_async_shared();
      if (kv_pending >= 0) barrier_arrive(&ss.kv_full[kv_pending]);  // a later head's K and V
      kv_pending = -1;
      barrier_arrive(&ss.full[stage]);
      if (more) {
        const int next_stage = (i + 1) % Traits::kStages;
        if (i + 1 >= Traits::kStages) barrier_wait(&ss.empty[next_stage], (((i + 1) / Traits::kStages) + 1) & 1);
        publish_visit(i + 1, next);
      }
      // After head j's first visit has gone out (and the next one is loading): the next head's K and V.
      if (i == j * per_head && j + 1 < kv_heads) kv_pending = issue_next_head(j);
    }
  }
}

}  // namespace attnkit::cuda::fmha_sm90
