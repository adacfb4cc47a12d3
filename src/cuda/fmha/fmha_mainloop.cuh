// Collective mainloop of the portable forward kernel (FlashAttention-2 schedule on SM80 tensor cores).
//
// For each KV tile the policy lists: S = Q*K^T with mma.sync m16n8k16 (fp16/bf16 in, fp32 out), operands
// read from the swizzled shared tiles with ldmatrix one 16-wide k-slice ahead of the MMAs; partial tiles
// then get their element mask (-inf) and, with a neighborhood's positional bias, their bias
// (fmha_positional_bias.cuh; box policy only); the online softmax turns S into P in registers, P is converted to
// fp16/bf16 in the A-operand register layout (two 16x8 accumulator blocks make one 16x16 A block), and
// O += P*V reads V with ldmatrix.trans. Loads form a two-buffer pipeline: V(j) is copied while
// Q*K(j)^T runs and K(j+1) while the softmax and P*V(j) run; each buffer is refilled only after the
// barrier that follows its last reader. Rows are gathered through a per-tile table of row offsets
// (one thread per row computes the token's address), so box tiles and strided layouts cost the copy
// loop nothing beyond one shared load per row.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_mask_tables.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_positional_bias.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

// acc += A * B over the k-slices of shared A and B, fetching slice k+1 while slice k multiplies.
template <class Mma, class Acc, class RegA, class RegB, class SharedA, class SharedB, class ViewA, class ViewB,
          class CopyA, class CopyB>
__device__ __forceinline__ void gemm_shared_shared(const Mma& mma, Acc& acc, RegA& ra, RegB& rb, const SharedA& sa,
                                                   const SharedB& sb, ViewA& va, ViewB& vb, const CopyA& copy_a,
                                                   const CopyB& copy_b) {
  using namespace cute;
  copy(copy_a, sa(_, _, 0), va(_, _, 0));
  copy(copy_b, sb(_, _, 0), vb(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    if (k + 1 < size<2>(ra)) {
      copy(copy_a, sa(_, _, k + 1), va(_, _, k + 1));
      copy(copy_b, sb(_, _, k + 1), vb(_, _, k + 1));
    }
    gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

// acc += A * B with A already in registers and B from shared memory.
template <class Mma, class Acc, class RegA, class RegB, class SharedB, class ViewB, class CopyB>
__device__ __forceinline__ void gemm_registers_shared(const Mma& mma, Acc& acc, const RegA& ra, RegB& rb,
                                                      const SharedB& sb, ViewB& vb, const CopyB& copy_b) {
  using namespace cute;
  copy(copy_b, sb(_, _, 0), vb(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    if (k + 1 < size<2>(ra)) copy(copy_b, sb(_, _, k + 1), vb(_, _, k + 1));
    gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

template <class Traits, class Policy>
struct FmhaMainloop {
  using Element = typename Traits::Element;
  using TiledMma = typename Traits::TiledMma;
  using Tile = typename Policy::Tile;
  static constexpr int kRows = Traits::kRows;
  static constexpr int kCols = Traits::kCols;

  // Starts of the rows of one KV tile in K and in V (nullptr: outside the extents), computed once per row
  // (one thread per K row and one per V row) instead of by every thread that copies a chunk of the row,
  // and the tile itself (so no register holds it across the MMAs). Double-buffered: tile j uses table j % 2.
  struct RowTable {
    const Element* k[Traits::kBlockN];
    const Element* v[Traits::kBlockN];
    Tile tile;
  };
  static_assert(2 * sizeof(RowTable) <= Traits::kRowTableBytes, "the row tables overflow their shared memory");

  Element* smem_q;
  Element* smem_k;
  Element* smem_v;
  RowTable* row_tables;            // shared, [2]
  const int64_t* kv_head_offsets;  // shared: K's and V's batch + KV-head element offsets

  __device__ __forceinline__ void fill_rows(const FmhaParams& p, const Policy& policy, const Tile& t, RowTable& table,
                                            int tid) const {
    for (int e = tid; e < 2 * Traits::kBlockN; e += Traits::kThreads) {
      const bool is_v = e >= Traits::kBlockN;
      const int row = is_v ? e - Traits::kBlockN : e;
      const TensorAddress& a = is_v ? p.v : p.k;
      const Element* start =
          tile_row_start<Element>(a, kv_head_offsets[is_v ? 1 : 0], p.kv_space, p.dilation, policy.origin(t), row);
      (is_v ? table.v : table.k)[row] = start;
    }
  }

  __device__ __forceinline__ void load_k(const FmhaParams& p, const RowTable& table, int tid) const {
    load_rows_async<Traits, Traits::kBlockN>(
        smem_k, typename Traits::SmemLayoutKV{}, p.k.data, [&](int row) { return table.k[row]; }, p.head_dim, tid);
    commit_async_copies();
  }

  __device__ __forceinline__ void load_v(const FmhaParams& p, const RowTable& table, int tid) const {
    load_rows_async<Traits, Traits::kBlockN>(
        smem_v, typename Traits::SmemLayoutKV{}, p.v.data, [&](int row) { return table.v[row]; }, p.head_dim_v, tid);
    commit_async_copies();
  }

  // acc_o and softmax must be reset, the Q tile load committed and the policy's shared state published.
  // bias_rows: the row terms of the positional bias offsets (read only when p.rpb.data is set). Returns
  // with every warp done with the K and V buffers and the row tables (loads may be in flight only when no
  // tile was visited).
  template <class AccO>
  __device__ __forceinline__ void operator()(const FmhaParams& p, const Policy& policy, const int (&row_of)[kRows],
                                             const int32_t (&bias_rows)[kRows], AccO& acc_o,
                                             OnlineSoftmax<kRows>& softmax, int tid) const {
    using namespace cute;
    const int count = policy.count();
    if (count == 0) return;

    Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
    Tensor sVt = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutVt{});

    TiledMma mma;
    auto thread_mma = mma.get_thread_slice(tid);
    Tensor tSrQ = thread_mma.partition_fragment_A(sQ);
    Tensor tSrK = thread_mma.partition_fragment_B(sK);
    Tensor tOrVt = thread_mma.partition_fragment_B(sVt);

    auto copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, mma);
    auto thread_copy_q = copy_q.get_thread_slice(tid);
    Tensor tSsQ = thread_copy_q.partition_S(sQ);
    Tensor tSrQ_view = thread_copy_q.retile_D(tSrQ);

    auto copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, mma);
    auto thread_copy_k = copy_k.get_thread_slice(tid);
    Tensor tSsK = thread_copy_k.partition_S(sK);
    Tensor tSrK_view = thread_copy_k.retile_D(tSrK);

    auto copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, mma);
    auto thread_copy_v = copy_v.get_thread_slice(tid);
    Tensor tOsVt = thread_copy_v.partition_S(sVt);
    Tensor tOrVt_view = thread_copy_v.retile_D(tOrVt);

    Tensor acc_s = partition_fragment_C(mma, Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{});
    Tensor s = as_rows_cols(acc_s);
    Tensor o = as_rows_cols(acc_o);
    Tensor tOrP = make_tensor<Element>(partition_shape_A(mma, Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{}));
    const int lane_class = tid % 4;

    {
      const Tile first = policy.first_tile(policy.lookahead(0));
      fill_rows(p, policy, first, row_tables[0], tid);
      if (tid == 0) row_tables[0].tile = first;
    }
    typename Policy::Lookahead ahead = policy.lookahead(1);  // tile i + 1's data, read during iteration i - 1
    __syncthreads();
    load_k(p, row_tables[0], tid);
    for (int i = 0; i < count; ++i) {
      RowTable& table = row_tables[i % 2];
      RowTable& next_table = row_tables[(i + 1) % 2];
      const typename Policy::TileBits bits = policy.fetch_bits(table.tile, p, tid);
      wait_async_copies<0>();
      __syncthreads();  // K(i) (and Q) landed; every warp is done with V(i-1) and with next_table
      load_v(p, table, tid);
      if (i + 1 < count) {
        const Tile next = policy.next_tile(table.tile, ahead);
        ahead = policy.lookahead(i + 2);
        fill_rows(p, policy, next, next_table, tid);
        if (tid == 0) next_table.tile = next;
      }

      clear(acc_s);
      gemm_shared_shared(mma, acc_s, tSrQ, tSrK, tSsQ, tSsK, tSrQ_view, tSrK_view, copy_q, copy_k);
      const Tile current = table.tile;
      if (!current.full) {
        uint32_t masks[kRows];
        policy.row_masks(current, bits, row_of, lane_class, masks);
        apply_row_masks<kRows, kCols>(s, masks);
      }
      float softmax_scale = p.scale_log2;
      if constexpr (Policy::kPositionalBias) {
        if (p.rpb.data != nullptr) {
          add_positional_bias<Traits>(p, current.index, bias_rows, s, tid);
          softmax_scale = 1.f;
        }
      }

      wait_async_copies<0>();
      __syncthreads();  // V(i) landed; every warp is done with K(i); next_table published
      if (i + 1 < count) load_k(p, next_table, tid);

      softmax.update(s, o, softmax_scale);
      convert_scores_to_operand<Element>(acc_s, tOrP);
      gemm_registers_shared(mma, acc_o, tOrP, tOrVt, tOsVt, tOrVt_view, copy_v);
    }
  }
};

}  // namespace attnkit::cuda::fmha
