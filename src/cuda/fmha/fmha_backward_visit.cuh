// One visit of a KV-tile-centric backward kernel (a Q tile of one query head, fmha_backward_tiles.cuh),
// as the portable and the Hopper dK/dV kernels both run it: the loads that fill a visit's buffers, and
// the mask bits of a partial visit's score tile.
//
// A visit's buffers hold Q and dO (cp.async row gathers into any swizzled layout load_rows_async
// accepts), the two row statistics (lse_log2 and delta: 4-byte copies of the workspace row by row, since
// a window-origin Q tile's rows lie in several of the grid's tiles), the query
// windows per dimension of a partial box visit, and, in fast mode, the dQ accumulator offset of each
// query row. The mask bits follow the scores' transposed orientation: keys as rows, queries as columns.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_backward_dq_accumulate.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Element>
struct BackwardVisitBuffers {
  Element* q;
  Element* d_o;
  float* stats;      // lse_log2 [BlockM] then delta [BlockM]
  int2* windows;     // [kMaxDims][BlockM] query windows (partial box visits)
  int64_t* dq_rows;  // [BlockM] dq_accum offsets (fast mode)
};

// Issues the cp.async copies of the CTA's K and V tiles (BlockN keys of KV head `head_kv`) and commits
// them as one group.
template <class Traits, int kBlockN, class SmemLayoutKV>
__device__ __forceinline__ void issue_kv_tile_loads(const FmhaBackwardParams& p, const DecodedTile& kv, int32_t batch,
                                                    int32_t head_kv, typename Traits::Element* smem_k,
                                                    typename Traits::Element* smem_v, int tid) {
  using Element = typename Traits::Element;
  const int64_t k_head = batch * p.k.batch_stride + head_kv * p.k.head_stride;
  const int64_t v_head = batch * p.v.batch_stride + head_kv * p.v.head_stride;
  load_rows_async<Traits, kBlockN>(
      smem_k, SmemLayoutKV{}, p.k.data,
      [&](int row) { return tile_row_start<Element>(p.k, k_head, p.kv_space, p.dilation, kv.origin, row); }, p.head_dim,
      tid);
  load_rows_async<Traits, kBlockN>(
      smem_v, SmemLayoutKV{}, p.v.data,
      [&](int row) { return tile_row_start<Element>(p.v, v_head, p.kv_space, p.dilation, kv.origin, row); },
      p.head_dim_v, tid);
  commit_async_copies();
}

// The workspace element (tile-row order) of query row `row` of visit `v`: the grid's Q tile that holds
// the row's query indices and the row's place in it (for a Q tile of the grid, that tile and `row`; a
// window-origin Q tile, KvBoxSchedule, spans up to 2^dims of the grid's tiles).
template <int kBlockM>
__device__ __forceinline__ int64_t visit_stats_row(const FmhaBackwardParams& p, int32_t batch, const QVisit& v,
                                                   int row) {
  int32_t position[kMaxDims];
  int32_t box_row = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    const int32_t i = v.origin.index[d] + in_box(p.q_space, d, row);
    position[d] = i >> p.q_space.box_log2[d];
    box_row += (i & ((1 << p.q_space.box_log2[d]) - 1)) << p.q_space.box_shift[d];
  }
  const int32_t tile = q_tile_linear(p, v.origin.group, position);
  return ((static_cast<int64_t>(batch) * p.heads_q + v.head) * p.total_q_tiles + tile) * kBlockM + box_row;
}

// The source of copy k < 2 kBlockM of visit `v`'s row statistics: lse_log2 of row k, then delta of row
// k - kBlockM.
template <int kBlockM>
__device__ __forceinline__ const float* visit_stats_source(const FmhaBackwardParams& p, int32_t batch, const QVisit& v,
                                                           int k) {
  return (k < kBlockM ? p.lse_log2 : p.delta) + visit_stats_row<kBlockM>(p, batch, v, k % kBlockM);
}

// Copy k's cp.async of 4 bytes of row statistics from `source` into `stats` (k < 2 kBlockM; others copy
// nothing). (Row by row rather than 16-byte chunks of a tile's rows: a window-origin Q tile's rows are not
// contiguous in the workspace, and one path for all visits kept the Hopper producer's spills down.)
template <int kBlockM>
__device__ __forceinline__ void copy_visit_stats(const float* source, float* stats, int k) {
  if (k < 2 * kBlockM) copy_4_bytes_async(shared_address(stats + k), source, true);
}

// Issues the cp.async copies of visit `v`'s row statistics into `stats` (lse_log2 then delta, kBlockM
// floats each, one float per copy: 2 kBlockM copies over the kThreads threads).
template <int kBlockM, int kThreads>
__device__ __forceinline__ void issue_visit_stats_copy(const FmhaBackwardParams& p, int32_t batch, const QVisit& v,
                                                       float* stats, int tid) {
  for (int k = tid; k < 2 * kBlockM; k += kThreads)
    copy_visit_stats<kBlockM>(visit_stats_source<kBlockM>(p, batch, v, k), stats, k);
}

// Plain stores of query row `row`'s data for visit `v`: its dq_accum offset (when `dq_row_offsets`: fast
// mode, unless the kernel adds dQ by tiles) and, for partial box visits, its key window per dimension
// (published by the caller's barrier).
template <bool kLists, int kBlockM, class Element>
__device__ __forceinline__ void store_visit_row_data(const FmhaBackwardParams& p, bool dq_row_offsets,
                                                     const DecodedTile& kv, int32_t batch, const QVisit& v,
                                                     const BackwardVisitBuffers<Element>& buffers, int row) {
  if (dq_row_offsets) buffers.dq_rows[row] = dq_accum_row_offset(p, batch, v, row);
  if constexpr (!kLists) {
    if (!v.full) {
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        if (d < p.dims) {
          const int32_t i = v.origin.index[d] + in_box(p.q_space, d, row);
          detail::IndexRange w{0, 0};
          if (i < kv.n_q[d]) w = window_of(p.rule[d], i, kv.n_kv[d]);
          buffers.windows[d * kBlockM + row] = make_int2(static_cast<int>(w.begin), static_cast<int>(w.end));
        }
      }
    }
  }
}

// Issues visit `v`'s loads into `buffers` and commits them as one cp.async group; the windows and row
// offsets are plain stores (published by the caller's barrier). Threads: Traits::kThreads >= BlockM.
template <class Traits, bool kLists, int kBlockM, class SmemLayoutQ>
__device__ __forceinline__ void issue_visit_loads(const FmhaBackwardParams& p, const DecodedTile& kv, int32_t batch,
                                                  const QVisit& v,
                                                  const BackwardVisitBuffers<typename Traits::Element>& buffers,
                                                  int tid) {
  using Element = typename Traits::Element;
  static_assert(Traits::kThreads >= kBlockM, "a thread per query row");
  const int64_t q_head = batch * p.q.batch_stride + v.head * p.q.head_stride;
  const int64_t do_head = batch * p.d_o.batch_stride + v.head * p.d_o.head_stride;
  load_rows_async<Traits, kBlockM>(
      buffers.q, SmemLayoutQ{}, p.q.data,
      [&](int row) { return tile_row_start<Element>(p.q, q_head, p.q_space, p.dilation, v.origin, row); }, p.head_dim,
      tid);
  load_rows_async<Traits, kBlockM>(
      buffers.d_o, SmemLayoutQ{}, p.d_o.data,
      [&](int row) { return tile_row_start<Element>(p.d_o, do_head, p.q_space, p.dilation, v.origin, row); },
      p.head_dim_v, tid);
  issue_visit_stats_copy<kBlockM, Traits::kThreads>(p, batch, v, buffers.stats, tid);
  commit_async_copies();
  if (tid < kBlockM) store_visit_row_data<kLists, kBlockM>(p, p.accumulate_dq, kv, batch, v, buffers, tid);
}

// Bit j of allowed[i]: key row i (key_index[i]: index per dimension for box masks, flat token in [0]
// for list masks) and query column col_of[j] of a partial visit are attended. Full visits: all set.
template <bool kLists, int kBlockM, int kRows, int kCols>
__device__ __forceinline__ void visit_allowed_bits(const FmhaBackwardParams& p, int32_t batch, const QVisit& v,
                                                   const int32_t (&key_index)[kRows][kMaxDims],
                                                   const int (&col_of)[kCols], const int2* windows,
                                                   uint32_t (&allowed)[kRows]) {
  static_assert(kCols <= 32, "one bit per column");
#pragma unroll
  for (int i = 0; i < kRows; ++i) allowed[i] = ~0u;
  if (v.full) return;
  if constexpr (kLists) {
    const int32_t seq_q = p.q_space.flat_extent;
    const int32_t seq_k = p.kv_space.flat_extent;
    const int32_t q0 = v.origin.index[0];
    if (p.list.key_bits != nullptr && q0 % 32 == 0) {
      // Element masks: a few words of the key-major bits per key row instead of a byte per pair.
      static_assert(kBlockM % 32 == 0, "a Q tile spans whole words of the key-major bits");
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int32_t k = key_index[i][0];
        uint32_t words[kBlockM / 32] = {};
        if (k < seq_k) load_key_bit_words(p.list, seq_k, batch, v.head, k, q0, words);
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if (!key_bit(words, col_of[j])) allowed[i] &= ~(1u << j);
        }
      }
      return;
    }
    const int64_t base = list_mask_base(p.list, batch, v.head);
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int32_t q = v.origin.index[0] + col_of[j];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int32_t k = key_index[i][0];
        const bool ok = q < seq_q && k < seq_k && list_mask_allows(p.list, base, q, k);
        if (!ok) allowed[i] &= ~(1u << j);
      }
    }
  } else {
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < p.dims) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          const int2 w = windows[d * kBlockM + col_of[j]];
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            if (key_index[i][d] < w.x || key_index[i][d] >= w.y) allowed[i] &= ~(1u << j);
          }
        }
      }
    }
  }
}

// P^T in place of S^T in a (keys, queries) view of a score accumulator: exp2(s * scale_log2 -
// lse_log2[query]) where attended (allowed), else 0.
template <int kRows, int kCols, class Scores>
__device__ __forceinline__ void scores_to_probabilities(Scores&& s, const uint32_t (&allowed)[kRows],
                                                        const float* lse_log2, const int (&col_of)[kCols],
                                                        float scale_log2) {
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const float lse = lse_log2[col_of[j]];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      s(i, j) = (allowed[i] >> j) & 1u ? fast_exp2(fmaf(s(i, j), scale_log2, -lse)) : 0.f;
    }
  }
}

}  // namespace attnkit::cuda::fmha
