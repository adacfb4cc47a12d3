// Helpers around CuTe's warpgroup MMAs shared by the Hopper forward and backward kernels: the (rows,
// columns) view of a wgmma accumulator, issuing a whole product into an open wgmma batch, the row and
// column of a thread's accumulator values, and packing an accumulator into a register A operand.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/fmha/fmha_operand_convert.cuh"

namespace attnkit::cuda::fmha_sm90 {

// View of a wgmma accumulator ((2, 2, N/8), MMA_M, MMA_N) as (rows, columns): rows (2, MMA_M), columns
// (2, N/8, MMA_N) — the order of the portable tier's score_row / score_col.
template <class Tensor>
__device__ __forceinline__ auto gmma_rows_cols(Tensor&& t) {
  using namespace cute;
  const auto l = t.layout();
  return make_tensor(
      t.data(), make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l))));
}

// Issues acc (=|+=) A*B over all k-blocks into the open wgmma batch (the caller arrives, commits and
// waits, so that two products can be in flight).
template <bool kAccumulate, class Mma, class FragA, class FragB, class Acc>
__device__ __forceinline__ void issue_gemm(Mma& mma, const FragA& a, const FragB& b, Acc& acc) {
  using namespace cute;
  mma.accumulate_ = kAccumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    gemm(mma, a(_, _, k), b(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// (row, column) within the Rows x Cols tile of value (i, j) of warpgroup thread `wg_tid`'s accumulator,
// in the order of gmma_rows_cols.
template <class Mma, int Rows, int Cols>
__device__ __forceinline__ auto gmma_accumulator_coord(int wg_tid, int i, int j) {
  using namespace cute;
  Mma mma;
  return gmma_rows_cols(mma.get_thread_slice(wg_tid).partition_C(make_identity_tensor(Shape<Int<Rows>, Int<Cols>>{})))(
      i, j);
}

// Packs a wgmma accumulator into the A fragment of a register-A wgmma whose reduction runs over the
// accumulator's columns: both list a thread's values in the same order (column pair, row half, 8-column
// block), so values are packed pairwise in order.
template <class Element, class Acc, class Frag>
__device__ __forceinline__ void pack_accumulator(const Acc& acc, Frag& a) {
  using namespace cute;
  uint32_t* words = reinterpret_cast<uint32_t*>(raw_pointer_cast(a.data()));
  CUTE_UNROLL
  for (int w = 0; w < size(acc) / 2; ++w) words[w] = fmha::pack_pair<Element>(acc(2 * w), acc(2 * w + 1));
}

// Value (i, j) of the gmma_rows_cols view of the accumulator that pack_accumulator() packed into `a`:
// word i + 2 (j / 2), half j % 2.
template <class Element, class Frag>
__device__ __forceinline__ float packed_value(const Frag& a, int i, int j) {
  const uint32_t word = reinterpret_cast<const uint32_t*>(cute::raw_pointer_cast(a.data()))[i + 2 * (j / 2)];
  return fmha::unpack_value<Element>(j % 2 ? word >> 16 : word & 0xffffu);
}

}  // namespace attnkit::cuda::fmha_sm90
