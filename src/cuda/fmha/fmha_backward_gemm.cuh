// Tensor-core products of the backward kernels on one CTA, and the register-level plumbing between them.
//
// gemm_smem_smem: acc += A * B^T with A (M x K) and B (N x K) both in shared memory, each thread
// fetching k-slice k+1 with ldmatrix while slice k multiplies (mma.sync m16n8k16, fp32 accumulate).
// gemm_registers_smem: acc += A * B^T with A already in registers in the MMA's operand layout.
// convert_scores_to_operand (fmha_operand_convert.cuh): an fp32 accumulator tile (rows split over warps) re-packed as
// the fp16/bf16 A operand of the next product without leaving registers; this is why every product's M is the row
// dimension that the warps own. accumulator_row / accumulator_col: the CTA-relative coordinates of a thread's values,
// from the TiledMMA's own partition of an identity tensor (so masks and statistics agree with the MMA by construction).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"

namespace attnkit::cuda::fmha {

template <class TiledMma, class CopyAtomA, class CopyAtomB, class Acc, class SharedA, class SharedB>
__device__ __forceinline__ void gemm_smem_smem(Acc& acc, const SharedA& sa, const SharedB& sb, int tid) {
  using namespace cute;
  TiledMma mma;
  auto thread_mma = mma.get_thread_slice(tid);
  Tensor ra = thread_mma.partition_fragment_A(sa);
  Tensor rb = thread_mma.partition_fragment_B(sb);
  auto copy_a = make_tiled_copy_A(CopyAtomA{}, mma);
  auto thread_copy_a = copy_a.get_thread_slice(tid);
  Tensor src_a = thread_copy_a.partition_S(sa);
  Tensor view_a = thread_copy_a.retile_D(ra);
  auto copy_b = make_tiled_copy_B(CopyAtomB{}, mma);
  auto thread_copy_b = copy_b.get_thread_slice(tid);
  Tensor src_b = thread_copy_b.partition_S(sb);
  Tensor view_b = thread_copy_b.retile_D(rb);
  copy(copy_a, src_a(_, _, 0), view_a(_, _, 0));
  copy(copy_b, src_b(_, _, 0), view_b(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    if (k + 1 < size<2>(ra)) {
      copy(copy_a, src_a(_, _, k + 1), view_a(_, _, k + 1));
      copy(copy_b, src_b(_, _, k + 1), view_b(_, _, k + 1));
    }
    gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

template <class TiledMma, class CopyAtomB, class Acc, class RegA, class SharedB>
__device__ __forceinline__ void gemm_registers_smem(Acc& acc, const RegA& ra, const SharedB& sb, int tid) {
  using namespace cute;
  TiledMma mma;
  auto thread_mma = mma.get_thread_slice(tid);
  Tensor rb = thread_mma.partition_fragment_B(sb);
  auto copy_b = make_tiled_copy_B(CopyAtomB{}, mma);
  auto thread_copy_b = copy_b.get_thread_slice(tid);
  Tensor src_b = thread_copy_b.partition_S(sb);
  Tensor view_b = thread_copy_b.retile_D(rb);
  copy(copy_b, src_b(_, _, 0), view_b(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < size<2>(ra); ++k) {
    if (k + 1 < size<2>(ra)) copy(copy_b, src_b(_, _, k + 1), view_b(_, _, k + 1));
    gemm(mma, ra(_, _, k), rb(_, _, k), acc);
  }
}

// Bits (i, j) of the rows-cols view (as_rows_cols) of the accumulator that convert_scores_to_operand() packed into
// `a`: row i = v1 + 2m, column j = v0 + 2n of accumulator value (v0 + 2 v1, m, n). With i and j known
// at compile time (unrolled loops) this is one register and a shift or mask.
template <int kM, class Frag>
__device__ __forceinline__ uint16_t operand_bits(const Frag& a, int i, int j) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(cute::raw_pointer_cast(a.data()));
  const int m = i / 2;
  const int v1 = i % 2;
  const int n = j / 2;
  const uint32_t w = words[v1 + 2 * (n % 2) + 4 * (m + kM * (n / 2))];
  return static_cast<uint16_t>(j % 2 ? w >> 16 : w & 0xffffu);
}

// The same element as a float.
template <class Element, int kM, class Frag>
__device__ __forceinline__ float operand_value(const Frag& a, int i, int j) {
  return unpack_value<Element>(operand_bits<kM>(a, i, j));
}

// CTA-relative row (column) of value row i (column j) of this thread's share of a Rows x Cols accumulator.
template <class TiledMma, int Rows, int Cols>
__device__ __forceinline__ int accumulator_row(int tid, int i) {
  using namespace cute;
  TiledMma mma;
  auto coords =
      as_rows_cols(mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<Rows>, Int<Cols>>{})));
  return get<0>(coords(i, 0));
}

template <class TiledMma, int Rows, int Cols>
__device__ __forceinline__ int accumulator_col(int tid, int j) {
  using namespace cute;
  TiledMma mma;
  auto coords =
      as_rows_cols(mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<Rows>, Int<Cols>>{})));
  return get<1>(coords(0, j));
}

}  // namespace attnkit::cuda::fmha
