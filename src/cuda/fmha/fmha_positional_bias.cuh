// Relative positional bias (AttentionMask::rpb, NATTEN <= 0.17 semantics) in the portable forward kernel.
//
// The entry of (query index q, key index k), per dimension in the tokens' dilation group, sits at element
// offset head * head_stride + sum_d (k_d - q_d + K_d - 1) * stride[d] of the table (fmha_params.hpp). The
// offset splits into a row term (head, K and -q: once per row of the thread's share of the score tile)
// and a key term (k = the KV tile's first index + the key's place in the box), so a score costs two adds,
// a clamp, one load (the table is small and stays in L1) and one FFMA: with a bias the scores go to log2
// units here, s * scale * log2(e) + bias * log2(e), and the online softmax then runs with scale 1.
// Masked scores (-inf) stay -inf and read nothing; the clamp keeps rows past the query extents (computed,
// never stored) inside the table.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

constexpr float kBiasLog2e = 1.4426950408889634f;  // the bias is added in log2 units

// The query term of the bias offset: head, K and -q of row `row` of a Q tile whose first index per
// dimension is `origin`.
__device__ __forceinline__ int32_t bias_query_term(const PositionalBias& b, int dims, const TokenSpace& q_space,
                                                   const int32_t (&origin)[kMaxDims], int32_t head, int row) {
  int32_t offset = head * b.head_stride;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < dims) offset += (b.kernel_size[d] - 1 - (origin[d] + in_box(q_space, d, row))) * b.stride[d];
  }
  return offset;
}

// The key term of the bias offset: k of row `row` of a KV tile whose first index per dimension is `origin`.
__device__ __forceinline__ int32_t bias_key_term(const PositionalBias& b, int dims, const TokenSpace& kv_space,
                                                 const int32_t (&origin)[kMaxDims], int row) {
  int32_t offset = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < dims) offset += (origin[d] + in_box(kv_space, d, row)) * b.stride[d];
  }
  return offset;
}

// The row term of the bias offset of CTA-relative query row `row`.
__device__ __forceinline__ int32_t bias_row_offset(const FmhaParams& p, const CtaTile& cta, int row) {
  return bias_query_term(p.rpb, p.dims, p.q_space, cta.q.index, cta.head, row);
}

__device__ __forceinline__ float load_bias(const PositionalBias& b, int32_t offset) {
  offset = min(max(offset, 0), b.max_offset);
  switch (b.type) {
    case BiasType::f16: return __half2float(static_cast<const __half*>(b.data)[offset]);
    case BiasType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(b.data)[offset]);
    default: return __ldg(static_cast<const float*>(b.data) + offset);
  }
}

// Scores s (this thread's rows x cols of a tile whose first key index per dimension is tile_index) to
// log2 units with the bias added.
template <class Traits, class Scores>
__device__ __forceinline__ void add_positional_bias(const FmhaParams& p, const int32_t (&tile_index)[kMaxDims],
                                                    const int32_t (&row_offset)[Traits::kRows], Scores& s, int tid) {
  int32_t tile_offset = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < p.dims) tile_offset += tile_index[d] * p.rpb.stride[d];
  }
#pragma unroll
  for (int j = 0; j < Traits::kCols; ++j) {
    const int col = score_col<Traits>(tid, j);
    int32_t key_offset = tile_offset;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < p.dims) key_offset += in_box(p.kv_space, d, col) * p.rpb.stride[d];
    }
#pragma unroll
    for (int i = 0; i < Traits::kRows; ++i) {
      const float x = s(i, j);
      const float bias = x == -INFINITY ? 0.f : load_bias(p.rpb, row_offset[i] + key_offset);
      s(i, j) = fmaf(x, p.scale_log2, bias * kBiasLog2e);
    }
  }
}

}  // namespace attnkit::cuda::fmha
