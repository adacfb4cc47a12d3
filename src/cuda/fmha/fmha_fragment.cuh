// Where a thread's share of an MMA accumulator sits in its tile: the (rows, columns) view of an
// accumulator fragment, and the CTA-relative row or column of each of the thread's values. The
// coordinates come from the TiledMMA's own partition of an identity tensor, so every user (softmax,
// masks, tile-list bits, LSE stores) agrees with the MMA by construction; they fold to a few integer
// operations on the thread index, computed once per thread.
#pragma once
#include <cute/tensor.hpp>

namespace attnkit::cuda::fmha {

// View of an accumulator fragment ((2,2), MMA_M, MMA_N) as (rows, columns) = ((2, MMA_M), (2, MMA_N)).
template <class Layout>
__device__ __forceinline__ constexpr auto row_col_layout(const Layout& acc) {
  using namespace cute;
  static_assert(decltype(rank(acc))::value == 3, "expects an MMA accumulator fragment");
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<2>(acc)));
}

template <class Tensor>
__device__ __forceinline__ auto as_rows_cols(Tensor&& t) {
  return cute::make_tensor(t.data(), row_col_layout(t.layout()));
}

// CTA-relative row of value row i (and column of value column j) of this thread's share of a
// BlockM x BlockN score tile, in the order of as_rows_cols.
template <class Traits>
__device__ __forceinline__ int score_row(int tid, int i) {
  using namespace cute;
  typename Traits::TiledMma mma;
  auto coords = as_rows_cols(
      mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{})));
  return get<0>(coords(i, 0));
}

template <class Traits>
__device__ __forceinline__ int score_col(int tid, int j) {
  using namespace cute;
  typename Traits::TiledMma mma;
  auto coords = as_rows_cols(
      mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{})));
  return get<1>(coords(0, j));
}

}  // namespace attnkit::cuda::fmha
