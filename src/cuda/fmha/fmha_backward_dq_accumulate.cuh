// Fast-mode dQ of the portable fused-attention backward (AttentionBackward::deterministic == false):
// the dK/dV kernel adds each (Q tile, KV tile) pair's partial dQ into an fp32 accumulator with atomics,
// and a convert step (fmha_backward_dq_convert.cuh) turns the accumulator into the caller's dQ. This replaces the dQ
// kernel (fmha_backward_dq.cuh), which recomputes S and dP per pair: 5 instead of 7 tile products, at the price of
// run-to-run rounding differences (the order of the fp32 additions depends on scheduling) and a 4 * B * Sq * Hq *
// D-byte accumulator in the workspace.
//
// Inside the dK/dV kernel (keys as rows, warps owning key rows), the product needs dS with queries as
// rows and the reduction over all BlockN keys, i.e. over every warp's rows: store_ds_transposed() writes
// dS^T (already packed as the dK product's A operand) element by element into a query-major shared tile
// (the swizzle keeps the 2-byte stores of a warp on distinct banks), and after a barrier accumulate_dq_partial()
// computes dS K in 32-column slices of the head dim (16 fp32 accumulators per thread alive at a time, not 64 for D =
// 128: the kernel already runs at the register limit) and adds each slice with red.global.add.v2.f32 on sm_90 (two
// scalar reductions elsewhere). The softmax scale is applied once, by the convert step, as the deterministic path
// applies it to the finished sum.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/fmha/fmha_backward_gemm.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

// *address += a, *(address + 1) += b without a return value; address 8-byte aligned, global memory.
__device__ __forceinline__ void reduce_add_pair(float* address, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(address), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(address, a);
  atomicAdd(address + 1, b);
#endif
}

// reduce_add_pair when `predicate` holds, as one predicated instruction (no branch), sm_90 only.
__device__ __forceinline__ void reduce_add_pair_if(bool predicate, float* address, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p red.global.add.v2.f32 [%0], {%1, %2};\n}\n" ::"l"(address),
      "f"(a), "f"(b), "r"(static_cast<int>(predicate))
      : "memory");
#else
  if (predicate) reduce_add_pair(address, a, b);
#endif
}

// Writes this thread's dS^T values into the query-major tile `smem_ds` (Traits::SmemLayoutDs): element
// (i, j) of the rows-cols view of the score tile that convert_scores_to_operand() packed into `ds_t`
// (kBlocksM MMA blocks of rows) is dS(query col_of[j], key row_of[i]). Reading the packed operand rather
// than the fp32 accumulator lets the accumulator die first, and stores exactly the values dK uses.
// The caller's barrier publishes the tile.
// A thread's queries are col_of[j % 2] + 8 * (j / 2) (MMA blocks 8 columns wide), and 8 query rows on
// is one whole swizzle atom on (8 * BlockN elements): 2 * kRows swizzled addresses serve every store,
// where addressing each element through the layout keeps kRows * kCols addresses alive across the
// visit loop (they depend on the thread only) and spills.
template <class Traits, int kBlocksM, int kRows, int kCols, class Operand>
__device__ __forceinline__ void store_ds_transposed(typename Traits::Element* smem_ds, const Operand& ds_t,
                                                    const int (&row_of)[kRows], const int (&col_of)[kCols]) {
  static_assert(sizeof(typename Traits::Element) == 2, "16-bit elements");
  uint16_t* tile = reinterpret_cast<uint16_t*>(smem_ds);
  constexpr typename Traits::SmemLayoutDs layout{};
  constexpr int kAtomRows = 8 * Traits::kBlockN;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      uint16_t* base = tile + layout(col_of[v], row_of[i]);
#pragma unroll
      for (int n = 0; n < kCols / 2; ++n) base[n * kAtomRows] = operand_bits<kBlocksM>(ds_t, i, 2 * n + v);
    }
  }
}

// threadIdx.x through a volatile asm, so that values derived from it cannot be hoisted out of the
// visit loop: the dQ product's ldmatrix addresses and column offsets depend on the thread only, and
// kept alive across the loop they push the d128 box dK/dV kernel into spilling (ptxas -v, bf16 d128
// box: 120 B spill stores / 272 B loads hoisted, 76 / 208 recomputed per visit). The list kernel,
// with fewer values alive across its loop, does better with them hoisted (0 / 0 against 40 / 92).
__device__ __forceinline__ int opaque_thread_index() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

// Element offset in dq_accum of row `row` of visit `v`'s Q tile, or -1 past the extents. The dK/dV
// kernel stores these per visit in shared memory with the visit's other loads, so that the visit's
// coordinates need not stay in registers until its dQ product.
__device__ __forceinline__ int64_t dq_accum_row_offset(const FmhaBackwardParams& p, int32_t batch, const QVisit& v,
                                                       int row) {
  const RowToken t = row_token(p.q_space, p.dilation, v.origin, row);
  return t.valid ? batch * p.dq_accum.batch_stride + v.head * p.dq_accum.head_stride + token_offset(p.dq_accum, t) : -1;
}

// dq_accum[rows] += dS K for the BlockM queries of a visit: dS from `smem_ds` (query-major, published),
// K from the CTA's K tile `smem_k` (Traits::SmemLayoutKV), the rows' accumulator offsets from
// `row_offsets` (dq_accum_row_offset). Rows past the extents are skipped (their dS is 0), as are
// columns at or past head_dim.
template <class Traits>
__device__ __forceinline__ void accumulate_dq_partial(const FmhaBackwardParams& p,
                                                      const typename Traits::Element* smem_ds,
                                                      const typename Traits::Element* smem_k,
                                                      const int64_t* row_offsets, int tid) {
  using namespace cute;
  using TiledMma = typename Traits::TiledMma;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kSliceCols = Traits::kDqSliceCols;
  constexpr int kRows = Traits::template kRowsOf<kBlockM>;     // queries per thread
  constexpr int kCols = Traits::template kColsOf<kSliceCols>;  // slice columns per thread, in pairs
  static_assert(kCols % 2 == 0, "accumulator columns come in adjacent pairs");

  float* accum = static_cast<float*>(p.dq_accum.data);
  const int first_col = accumulator_col<TiledMma, kBlockM, kSliceCols>(tid, 0);
  int64_t row_base[kRows];  // -1: past the extents
#pragma unroll
  for (int i = 0; i < kRows; ++i) row_base[i] = row_offsets[accumulator_row<TiledMma, kBlockM, kSliceCols>(tid, i)];

  Tensor sDs = make_tensor(make_smem_ptr(smem_ds), typename Traits::SmemLayoutDs{});
  Tensor sKt_all = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKVt{});
#pragma unroll
  for (int slice = 0; slice < Traits::kDqSlices; ++slice) {
    if (slice * kSliceCols >= p.head_dim) break;  // uniform: the rest of K is zero padding
    Tensor sKt = local_tile(sKt_all, Shape<Int<kSliceCols>, Int<kBlockN>>{}, make_coord(slice, 0));
    Tensor acc = partition_fragment_C(TiledMma{}, Shape<Int<kBlockM>, Int<kSliceCols>>{});
    clear(acc);
    gemm_smem_smem<TiledMma, typename Traits::SmemCopyAtom, typename Traits::SmemCopyAtomTransposed>(acc, sDs, sKt,
                                                                                                     tid);
    Tensor d = as_rows_cols(acc);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (row_base[i] < 0) continue;
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        const int col = slice * kSliceCols + first_col + 8 * (j / 2);  // MMA blocks 8 columns wide
        if (col < p.head_dim) reduce_add_pair(accum + row_base[i] + col, d(i, j), d(i, j + 1));
      }
    }
  }
}

}  // namespace attnkit::cuda::fmha
