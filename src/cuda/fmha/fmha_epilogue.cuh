// Collective epilogue of the portable forward kernel: normalises O by the softmax row sums (rows with
// no key give 0), writes the LSE (natural log, -inf for rows with no key) from the lane that leads
// each quad, and stores O. O goes through shared memory (the Q tile's buffer, free once the mainloop's
// last Q*K^T is done) so that the global stores are whole 16-byte chunks of token rows, gathered by the
// same row->token map as the Q load; only rows inside the extents and the first Dv columns are written.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

// Writes the natural-log LSE of this thread's rows (row_of: CTA-relative) when the call asked for it;
// `leader`: the thread that speaks for its quad (the four lanes that share a row).
template <int Rows>
__device__ __forceinline__ void store_lse_rows(const FmhaParams& p, const CtaTile& cta, const float (&lse)[Rows],
                                               const int (&row_of)[Rows], bool leader) {
  if (p.lse.data == nullptr || !leader) return;
  const int64_t head_offset = cta.batch * p.lse.batch_stride + cta.head * p.lse.head_stride;
#pragma unroll
  for (int i = 0; i < Rows; ++i) {
    const RowToken t = row_token(p.q_space, p.dilation, cta.q, row_of[i]);
    if (t.valid) static_cast<float*>(p.lse.data)[head_offset + token_offset(p.lse, t)] = lse[i];
  }
}

template <class Traits>
struct FmhaEpilogue {
  using Element = typename Traits::Element;
  static constexpr int kRows = Traits::kRows;

  // Call after every warp is done with the Q buffer (the caller's barrier).
  template <class AccO>
  __device__ __forceinline__ void operator()(const FmhaParams& p, const CtaTile& cta, AccO& acc_o,
                                             OnlineSoftmax<kRows>& softmax, const int (&row_of)[kRows], Element* smem_o,
                                             int tid) const {
    using namespace cute;
    Tensor o = as_rows_cols(acc_o);
    float lse[kRows];
    // With a positional bias the mainloop kept the row maxima in log2 units already.
    softmax.finalize(o, p.rpb.data != nullptr ? 1.f : p.scale_log2, lse);

    store_lse_rows(p, cta, lse, row_of, tid % 4 == 0);

    // Registers -> shared (swizzled like Q), as 32-bit pairs.
    Tensor sO = make_tensor(make_smem_ptr(smem_o), typename Traits::SmemLayoutQ{});
    Tensor rO = make_tensor_like<Element>(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i) rO(i) = static_cast<Element>(acc_o(i));
    typename Traits::TiledMma mma;
    auto copy_o = make_tiled_copy_C(typename Traits::SmemStoreAtomO{}, mma);
    auto thread_copy_o = copy_o.get_thread_slice(tid);
    Tensor tOrO = thread_copy_o.retile_S(rO);
    Tensor tOsO = thread_copy_o.partition_D(sO);
    copy(copy_o, tOrO, tOsO);
    __syncthreads();

    // Shared -> global, one 16-byte chunk per thread and pass.
    constexpr int kElementsPerChunk = 16 / int(sizeof(Element));
    const int col = (tid % Traits::kChunksPerRow) * kElementsPerChunk;
    if (col >= p.head_dim_v) return;
    const int first_row = tid / Traits::kChunksPerRow;
    const int64_t head_offset = cta.batch * p.o.batch_stride + cta.head * p.o.head_stride;
    Element* out = static_cast<Element*>(p.o.data);
    static_assert(Traits::kBlockM % Traits::kRowsPerPass == 0, "passes must cover whole tiles");
#pragma unroll
    for (int pass = 0; pass < Traits::kBlockM / Traits::kRowsPerPass; ++pass) {
      const int row = first_row + pass * Traits::kRowsPerPass;
      const RowToken t = row_token(p.q_space, p.dilation, cta.q, row);
      if (t.valid) {
        const uint4 chunk = *reinterpret_cast<const uint4*>(&sO(row, col));
        *reinterpret_cast<uint4*>(out + head_offset + token_offset(p.o, t) + col) = chunk;
      }
    }
  }
};

}  // namespace attnkit::cuda::fmha
