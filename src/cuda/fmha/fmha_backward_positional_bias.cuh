// Relative positional bias (AttentionMask::rpb) in the portable backward: the bias in the recomputed
// probabilities, and the gradient of the bias table.
//
// Probabilities: P = exp2(s * scale*log2(e) + bias*log2(e) - lse_log2) where attended, with the bias entry
// of each (key, query) pair addressed as in the forward (fmha_positional_bias.cuh): a key term and a
// query term per thread row and column, one load per attended score.
//
// Gradient: d rpb[h, e] = sum over the batch and the queries of dS at the pairs whose relative offset is
// e (e_d = k_d - q_d + K_d - 1 per dimension, in the dilation group). Deterministic in both backward
// modes, without atomics:
//  1. each visit of the dK/dV kernel (one Q tile of one query head against the CTA's KV tile) puts its fp32
//     dS^T tile in shared memory; the offsets the visit can hold form a box (per dimension, from the KV
//     box's first key minus the Q box's last query to the KV box's last key minus the Q box's first
//     query, clipped to [0, 2K_d - 2]); each offset is owned by one thread, which sums the tile's
//     elements of that offset (at most one per query row, rows in order) and adds the sum to the CTA's
//     partial row (workspace, zeroed by the preprocess kernel; one row per (split, batch, query head,
//     KV tile), so no two CTAs write the same row);
//  2. fmha_backward_rpb_reduce_kernel sums the partial rows of each (head, entry) in a fixed order and
//     writes grad_rpb in its dtype and strides.
// Masked pairs, queries past the extents and rows without keys have P = 0, hence dS = 0, so the owner
// loop needs no mask test, only the box bounds.
// Work of step 1 per visit: (offsets in the box) x BlockM shared loads spread over the CTA's threads.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_positional_bias.cuh"
#include "cuda/fmha/fmha_softmax.cuh"

namespace attnkit::cuda::fmha {

// P^T in place of S^T (keys as rows, queries as columns) with the bias added: key_term per row,
// query_term per column (bias_key_term / bias_query_term).
template <int kRows, int kCols, class Scores>
__device__ __forceinline__ void scores_to_probabilities_with_bias(Scores&& s, const uint32_t (&allowed)[kRows],
                                                                  const float* lse_log2, const int (&col_of)[kCols],
                                                                  const FmhaBackwardParams& p,
                                                                  const int32_t (&key_term)[kRows],
                                                                  const int32_t (&query_term)[kCols]) {
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const float lse = lse_log2[col_of[j]];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if ((allowed[i] >> j) & 1u) {
        const float bias = load_bias(p.rpb, key_term[i] + query_term[j]);
        s(i, j) = fast_exp2(fmaf(s(i, j), p.scale_log2, fmaf(bias, kBiasLog2e, -lse)));
      } else {
        s(i, j) = 0.f;
      }
    }
  }
}

// The CTA's partial row of query head `head` (step 1 above).
__device__ __forceinline__ float* bias_partial_row(const FmhaBackwardParams& p, int32_t split, int32_t batch,
                                                   int32_t head, int32_t kv_tile) {
  const int64_t row = ((static_cast<int64_t>(split) * p.batch + batch) * p.heads_q + head) * p.total_kv_tiles + kv_tile;
  return p.rpb_partial + row * p.rpb_entries;
}

// Zeroing is the preprocess kernel's; this adds one visit's dS^T (fp32, [kBlockN keys][kBlockM queries] in
// shared memory, published) to `partial` (step 1 above). Call with every thread of the CTA.
template <int kBlockM, int kThreads>
__device__ __forceinline__ void accumulate_bias_gradient(const FmhaBackwardParams& p, const float* ds,
                                                         const int32_t (&kv_origin)[kMaxDims],
                                                         const int32_t (&q_origin)[kMaxDims], float* partial, int tid) {
  int32_t first[kMaxDims];
  int32_t count[kMaxDims];
  int32_t dense_stride[kMaxDims];
  int32_t total = 1;
  int32_t stride = 1;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    first[d] = 0;
    count[d] = 1;
    dense_stride[d] = 0;
    if (d < p.dims) {
      const int32_t k = p.rpb.kernel_size[d];
      const int32_t lo = max(kv_origin[d] - (q_origin[d] + (1 << p.q_space.box_log2[d]) - 1) + k - 1, 0);
      const int32_t hi = min(kv_origin[d] + (1 << p.kv_space.box_log2[d]) - 1 - q_origin[d] + k - 1, 2 * k - 2);
      first[d] = lo;
      count[d] = max(hi - lo + 1, 0);
      dense_stride[d] = stride;
      stride *= 2 * k - 1;
    }
    total *= count[d];
  }
  for (int32_t idx = tid; idx < total; idx += kThreads) {
    int32_t e[kMaxDims];
    int32_t rest = idx;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      e[d] = first[d] + rest % count[d];
      rest /= count[d];
    }
    float sum = 0.f;
    for (int r = 0; r < kBlockM; ++r) {
      bool inside = true;
      int key_row = 0;
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        if (d < p.dims) {
          const int32_t key = q_origin[d] + in_box(p.q_space, d, r) + e[d] - (p.rpb.kernel_size[d] - 1);
          const int32_t place = key - kv_origin[d];
          inside = inside && place >= 0 && place < (1 << p.kv_space.box_log2[d]);
          key_row += place << p.kv_space.box_shift[d];
        }
      }
      if (inside) sum += ds[key_row * kBlockM + r];
    }
    int32_t dense = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < p.dims) dense += e[d] * dense_stride[d];
    }
    partial[dense] += sum;
  }
}

__device__ __forceinline__ void store_bias_gradient(const PositionalBias& b, int32_t offset, float value) {
  switch (b.type) {
    case BiasType::f16: static_cast<__half*>(const_cast<void*>(b.data))[offset] = __float2half_rn(value); break;
    case BiasType::bf16:
      static_cast<__nv_bfloat16*>(const_cast<void*>(b.data))[offset] = __float2bfloat16_rn(value);
      break;
    default: static_cast<float*>(const_cast<void*>(b.data))[offset] = value;
  }
}

// Step 2: one thread per (entry, head) of grad_rpb; grid (ceil(rpb_entries / kThreads), Hq).
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    fmha_backward_rpb_reduce_kernel(const __grid_constant__ FmhaBackwardParams p) {
  const int32_t entry = static_cast<int32_t>(blockIdx.x) * kThreads + static_cast<int32_t>(threadIdx.x);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  if (entry >= p.rpb_entries) return;
  float sum = 0.f;
  for (int32_t split = 0; split < p.kv_splits; ++split) {
    for (int32_t batch = 0; batch < p.batch; ++batch) {
      const float* rows = bias_partial_row(p, split, batch, head, 0);
      for (int32_t tile = 0; tile < p.total_kv_tiles; ++tile)
        sum += rows[static_cast<int64_t>(tile) * p.rpb_entries + entry];
    }
  }
  int32_t offset = head * p.grad_rpb.head_stride;
  int32_t rest = entry;
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < p.dims) {
      const int32_t entries = 2 * p.grad_rpb.kernel_size[d] - 1;
      offset += (rest % entries) * p.grad_rpb.stride[d];
      rest /= entries;
    }
  }
  store_bias_gradient(p.grad_rpb, offset, sum);
}

}  // namespace attnkit::cuda::fmha
