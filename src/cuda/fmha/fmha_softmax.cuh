// Online softmax over the score tiles of one Q tile, in registers, fp32.
//
// Each thread holds kRows rows x kCols columns of every score tile; the four lanes of a quad share a
// row, so row maxima are reduced with two shuffles. Scores are exponentiated as
// exp2(s * scale*log2(e) - m * scale*log2(e)) with one FFMA and one ex2 per score. A row that has
// seen no key yet keeps max = -inf and uses 0 as its reference, so masked rows give exp2(-inf) = 0 and
// never -inf - -inf = NaN. Row sums stay per thread (lanes share the row's max, hence its rescale
// factors) and are reduced across the quad once, in finalize(). A row with no key at all ends with
// sum 0: its output is 0 and its LSE -inf.
#pragma once
#include <cute/tensor.hpp>

#include <cmath>

#include "cuda/fmha/fmha_fragment.cuh"

namespace attnkit::cuda::fmha {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int Rows>
struct OnlineSoftmax {
  float row_max[Rows];
  float row_sum[Rows];

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.f;
    }
  }

  // Replaces the scores by their exponentials relative to the updated row maxima, updates the row sums,
  // and returns in correction[i] the factor the output accumulator must be scaled by (on the first tile
  // exp2(-inf) = 0, times a zero accumulator). Split from rescale() so that a pipelined caller can
  // exponentiate tile j while the product of tile j-1 still writes the accumulator.
  template <class Scores>
  __device__ __forceinline__ void update_scores(Scores& s, float scale_log2, float (&correction)[Rows]) {
    using namespace cute;
    // Maxima and sums run in kChains independent chains per row (a lone warp's dependent chain of
    // 32 FMNMX or FADD is latency, not throughput).
    constexpr int kColumns = decltype(size<1>(s))::value;
    constexpr int kChains = kColumns % 4 == 0 ? 4 : 1;
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
      float chain_max[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) chain_max[c] = row_max[i];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) chain_max[j % kChains] = fmaxf(chain_max[j % kChains], s(i, j));
      float m = chain_max[0];
#pragma unroll
      for (int c = 1; c < kChains; ++c) m = fmaxf(m, chain_max[c]);
      m = quad_max(m);
      const float reference = m == -INFINITY ? 0.f : m * scale_log2;
      float chain_sum[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) chain_sum[c] = 0.f;
#pragma unroll
      for (int j = 0; j < kColumns; ++j) {
        const float e = fast_exp2(fmaf(s(i, j), scale_log2, -reference));
        s(i, j) = e;
        chain_sum[j % kChains] += e;
      }
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < kChains; ++c) sum += chain_sum[c];
      correction[i] = fast_exp2(row_max[i] * scale_log2 - reference);
      row_sum[i] = row_sum[i] * correction[i] + sum;
      row_max[i] = m;
    }
  }

  template <class Output>
  __device__ __forceinline__ static void rescale(Output& o, const float (&correction)[Rows]) {
    using namespace cute;
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
#pragma unroll
      for (int j = 0; j < size<1>(o); ++j) o(i, j) *= correction[i];
    }
  }

  // update_scores, then rescale of the output accumulator.
  template <class Scores, class Output>
  __device__ __forceinline__ void update(Scores& s, Output& o, float scale_log2) {
    float correction[Rows];
    update_scores(s, scale_log2, correction);
    rescale(o, correction);
  }

  // Normalises the output rows and returns each row's natural-log LSE in lse[i].
  template <class Output>
  __device__ __forceinline__ void finalize(Output& o, float scale_log2, float (&lse)[Rows]) {
    using namespace cute;
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int i = 0; i < Rows; ++i) {
      const float sum = quad_sum(row_sum[i]);
      const bool any = sum > 0.f;
      const float inverse = any ? 1.f / sum : 0.f;
#pragma unroll
      for (int j = 0; j < size<1>(o); ++j) o(i, j) *= inverse;
      lse[i] = any ? (row_max[i] * scale_log2 + __log2f(sum)) * kLn2 : -INFINITY;
    }
  }
};

}  // namespace attnkit::cuda::fmha
