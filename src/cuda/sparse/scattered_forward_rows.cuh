// The forward's per-warp state and step, shared by its two pipelines (scattered_forward_kernel.cuh): a warp's 16
// query rows with their Q fragments, fp32 output accumulator and softmax statistics in registers.
//
// A step of 16 listed keys: S = Q K_U^T (ldmatrix of the gathered K rows, mma m16n8k16), entries whose bit is
// clear set to -inf, online softmax in base 2 (scale * log2 e folded into the exponent's fma) with a lazy base:
// the rows' maxima are exchanged and the output rescaled only in a step where some score exceeds its row's base
// by more than kRescaleSlack (a warp vote decides), then O += P V_U with the gathered V rows loaded transposed.
// A row without any key ends with O = 0 and LSE = -inf.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

// How far (log2 units) a score may exceed its row's base before the base moves: probabilities up to 2^8
// (exact in fp16 / bf16 and fp32), so most steps skip the row-max exchange and the rescaling.
inline constexpr float kRescaleSlack = 8.0f;

template <class Element, int Width>
struct ScatteredForwardRows {
  uint32_t q[Width / 16][4];
  float acc[Width / 8][4];
  // row_max: per row, the base (log2 units, scale folded in) of every probability so far; raw_limit: the
  // raw score above which the base must move, kRescaleSlack above it.
  float row_max[2];
  float raw_limit[2];
  float row_sum[2];

  __device__ __forceinline__ void load(const ScatteredForwardParams& p, int32_t batch, int32_t head, int32_t first_row,
                                       int lane) {
    load_a_fragments<Element, Width>(q, p.q, batch, head, first_row, p.seq_q, p.head_dim, lane);
    zero_c_fragments<Width>(acc);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_max[half] = -INFINITY;
      raw_limit[half] = -INFINITY;
      row_sum[half] = 0.0f;
    }
  }

  __device__ __forceinline__ void step(float scale_log2, uint32_t k_address, uint32_t v_address,
                                       const StepEntries& entries, int lane) {
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    gathered_scores<Element, Width>(s, q, k_address, entries, lane);
    float block_max[2] = {-INFINITY, -INFINITY};
    for_each_step_entry(entries, lane, [&](int block, int i, bool attended) {
      s[block][i] = attended ? s[block][i] : -INFINITY;
      block_max[i >> 1] = fmaxf(block_max[i >> 1], s[block][i]);
    });
    if (__any_sync(kFullWarp, block_max[0] > raw_limit[0] || block_max[1] > raw_limit[1])) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(kFullWarp, block_max[half], 1));
        block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(kFullWarp, block_max[half], 2));
        const float new_max = fmaxf(row_max[half], block_max[half] * scale_log2);
        if (new_max > row_max[half]) {
          const float rescale = fast_exp2(row_max[half] - new_max);
          row_sum[half] *= rescale;
#pragma unroll
          for (int i = 0; i < Width / 8; ++i) {
            acc[i][2 * half] *= rescale;
            acc[i][2 * half + 1] *= rescale;
          }
          row_max[half] = new_max;
          raw_limit[half] = (new_max + kRescaleSlack) / scale_log2;
        }
      }
    }
    const float base[2] = {row_max[0] == -INFINITY ? 0.0f : row_max[0], row_max[1] == -INFINITY ? 0.0f : row_max[1]};
#pragma unroll
    for (int block = 0; block < 2; ++block) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[block][i] = fast_exp2(fmaf(s[block][i], scale_log2, -base[i >> 1]));
        row_sum[i >> 1] += s[block][i];
      }
    }
    uint32_t probabilities[4];
    pack_a_fragment<Element>(probabilities, s);
    gathered_accumulate<Element, Width>(acc, probabilities, v_address, entries, lane);
  }

  // Writes O = acc / rowsum and, when asked, LSE (natural log).
  __device__ __forceinline__ void store(const ScatteredForwardParams& p, int32_t batch, int32_t head, int32_t first_row,
                                        int lane) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_sum[half] += __shfl_xor_sync(kFullWarp, row_sum[half], 1);
      row_sum[half] += __shfl_xor_sync(kFullWarp, row_sum[half], 2);
    }
    const float inverse_lo = row_sum[0] > 0.0f ? 1.0f / row_sum[0] : 0.0f;
    const float inverse_hi = row_sum[1] > 0.0f ? 1.0f / row_sum[1] : 0.0f;
    store_c_fragments<Element, Width>(acc, p.out, batch, head, first_row, p.seq_q, p.head_dim_v, inverse_lo, inverse_hi,
                                      lane);
    if (p.lse.data == nullptr || lane % 4 != 0) return;
    float* lse = static_cast<float*>(p.lse.data);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t row = first_row + lane / 4 + 8 * half;
      if (row >= p.seq_q) continue;
      const float value =
          row_sum[half] > 0.0f ? (row_max[half] + log2f(row_sum[half])) * 0.69314718055994531f : -INFINITY;
      lse[p.lse.offset(batch, row, head)] = value;
    }
  }
};

}  // namespace attnkit::cuda::sparse
