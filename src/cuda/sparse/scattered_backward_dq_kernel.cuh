// dQ kernel of the scattered-sparse backward: the forward's gathered walk with the gradient in place of
// the output.
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head); a warp keeps Q and dO fragments of
// its 16 rows, their lse (base 2) and delta = rowsum(dO * O), and an fp32 dQ accumulator in registers
// (ScatteredGradQRows). The CTA streams K and V tiles of its KV head (cp.async, two stages; on sm_90 at width 64 a
// producer warp stages them with TMA instead, scattered_tma_pipeline.cuh); per tile and per 16 keys of the warp's union
// list (the pre-pass's query-major TileLists, copied next to the tile): S = Q K_U^T, P = exp2(S * scale log2 e
// - lse2) on attended entries (0 elsewhere), dP = dO V_U^T, dS = P (dP - delta), dQ += dS K_U (K rows gathered
// again, transposed). At the end dQ is scaled by the softmax scale and written in the input dtype. No atomics:
// every dQ row has one owner.
//
// Counts per (batch, head), u the union fraction of the forward kernel: mma FLOPs 2 Sq Sk u (2 D + Dv);
// shared reads 2 (2 D + Dv) bytes per union key and warp; L2 -> shared (Sq / (16 Warps)) Sk 2 (D + Dv).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

// A warp's 16 query rows: Q and dO fragments, lse2 and delta of its rows, the fp32 dQ accumulator; the step above.
// The kernel is scattered_rows_kernel (scattered_forward_kernel.cuh) with these rows.
template <class Element, int Width>
struct ScatteredGradQRows {
  uint32_t q[Width / 16][4];
  uint32_t grad_out[Width / 16][4];
  float lse2[2];
  float delta[2];
  float grad_q[Width / 8][4];

  __device__ __forceinline__ void load(const ScatteredBackwardParams& p, int32_t batch, int32_t head, int32_t first_row,
                                       int lane) {
    load_a_fragments<Element, Width>(q, p.q, batch, head, first_row, p.seq_q, p.head_dim, lane);
    load_a_fragments<Element, Width>(grad_out, p.grad_out, batch, head, first_row, p.seq_q, p.head_dim_v, lane);
    const int64_t row_base = (int64_t{batch} * p.heads_q + head) * p.row_pitch;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t row = first_row + lane / 4 + 8 * half;
      lse2[half] = row < p.seq_q ? p.lse_log2[row_base + row] : 0.0f;
      delta[half] = row < p.seq_q ? p.delta[row_base + row] : 0.0f;
    }
    zero_c_fragments<Width>(grad_q);
  }

  __device__ __forceinline__ void step(float scale_log2, uint32_t k_address, uint32_t v_address,
                                       const StepEntries& entries, int lane) {
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float dp[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    gathered_scores<Element, Width>(s, q, k_address, entries, lane);
    gathered_scores<Element, Width>(dp, grad_out, v_address, entries, lane);
    for_each_step_entry(entries, lane, [&](int block, int i, bool attended) {
      const float probability = attended ? fast_exp2(s[block][i] * scale_log2 - lse2[i >> 1]) : 0.0f;
      s[block][i] = probability * (dp[block][i] - delta[i >> 1]);
    });
    uint32_t grad_scores[4];
    pack_a_fragment<Element>(grad_scores, s);
    gathered_accumulate<Element, Width>(grad_q, grad_scores, k_address, entries, lane);
  }

  // Writes dQ = scale * the accumulator in the input dtype.
  __device__ __forceinline__ void store(const ScatteredBackwardParams& p, int32_t batch, int32_t head,
                                        int32_t first_row, int lane) {
    store_c_fragments<Element, Width>(grad_q, p.grad_q, batch, head, first_row, p.seq_q, p.head_dim, p.scale, p.scale,
                                      lane);
  }
};

}  // namespace attnkit::cuda::sparse
