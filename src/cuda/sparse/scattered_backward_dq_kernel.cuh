// dQ kernel of the scattered-sparse backward: the forward's walk over 8-row unions with the gradient in place of
// the output.
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head); a warp owns 16 of them as two groups of
// 8 and keeps, per group, Q^T and dO^T as mma B fragments, the lse (base 2) and delta = rowsum(dO * O) of the
// lane's queries 2t and 2t + 1, and an fp32 accumulator of dQ^T in registers. The CTA streams K and V tiles of
// its KV head (cp.async, two stages); per tile and per 16 keys of a group's union list (the pre-pass's
// query-major EightRowTileLists, copied next to the tile; stream_key_value_group_steps), with the keys as the
// mma's M dimension: S^T = K_U Q^T, P^T = exp2(S^T * scale log2 e - lse2) on attended entries (0 elsewhere),
// dP^T = V_U dO^T, dS^T = P^T (dP^T - delta), dQ^T += K_U^T dS^T (K rows gathered again, transposed; dS^T
// re-laid into B fragments by movmatrix). A list whose length is an odd multiple of 8 ends with a step of 8
// keys. At the end dQ is scaled by the softmax scale, transposed back and written in the input dtype. No
// atomics: every dQ row has one owner.
//
// Counts per (batch, head): the forward kernel's steps (scattered_forward_kernel.cuh: at 1 %, D 64, 2.31 steps
// of 16 keys x 8 queries and 1.26 of 8 x 8 per 16 rows and tile, where unions of 16 rows would take 2.89 steps
// of 16 x 16), each with three products (S^T, dP^T, dQ^T) instead of two: mma FLOPs 0.58x those of 16-row
// unions, shared reads 1.02x (2 (2 D + Dv) bytes per listed key and group); L2 -> shared (Sq / (16 Warps)) Sk
// 2 (D + Dv).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_group_steps.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

template <class Element, int Width, int Warps>
__global__ void __launch_bounds__(Warps * 32, 1) scattered_backward_dq_kernel(const ScatteredBackwardParams p) {
  using Traits = ScatteredForwardTraits<Element, Width, Warps>;  // same tiles and list buffers: K and V, two stages
  constexpr int kTile = Traits::kTile;
  extern __shared__ __align__(128) unsigned char shared[];
  Element* tiles = reinterpret_cast<Element*>(shared);
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int lane = thread % 32;
  uint32_t* lists = reinterpret_cast<uint32_t*>(tiles + 4 * Traits::kTileElements) + warp * 2 * Traits::kListEntries;

  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t kv_head = head / p.heads_per_kv;
  const int32_t first_row = static_cast<int32_t>(blockIdx.x) * Traits::kRows + warp * 16;
  const int t = lane % 4;

  uint32_t q[2][Width / 16][2];
  uint32_t grad_out[2][Width / 16][2];
  float lse2[2][2];
  float delta[2][2];
  float grad_q[2][Width / 16][4];
  const int64_t row_base = (int64_t{batch} * p.heads_q + head) * p.row_pitch;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    load_b_fragments<Element, Width>(q[h], p.q, batch, head, first_row + 8 * h, p.seq_q, p.head_dim, lane);
    load_b_fragments<Element, Width>(grad_out[h], p.grad_out, batch, head, first_row + 8 * h, p.seq_q, p.head_dim_v,
                                     lane);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int32_t row = first_row + 8 * h + 2 * t + j;
      lse2[h][j] = row < p.seq_q ? p.lse_log2[row_base + row] : 0.0f;
      delta[h][j] = row < p.seq_q ? p.delta[row_base + row] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < Width / 16; ++i) grad_q[h][i][0] = grad_q[h][i][1] = grad_q[h][i][2] = grad_q[h][i][3] = 0.0f;
  }

  auto step = [&](auto group, auto half, uint32_t k_address, uint32_t v_address, const uint16_t* step_list) {
    constexpr int h = decltype(group)::value;
    constexpr bool kHalf = decltype(half)::value;
    float s[4];
    float dp[4];
    group_scores<Element, Width, kHalf>(s, q[h], k_address, step_list, lane);
    group_scores<Element, Width, kHalf>(dp, grad_out[h], v_address, step_list, lane);
    uint32_t entries[2];
    group_step_entries<kHalf>(entries, step_list, lane);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float probability =
          group_value_attended(entries, i, lane) ? fast_exp2(s[i] * p.scale_log2 - lse2[h][i & 1]) : 0.0f;
      s[i] = probability * (dp[i] - delta[h][i & 1]);
    }
    group_accumulate<Element, Width, kHalf>(grad_q[h], s, k_address, step_list, lane);
  };
  stream_key_value_group_steps<Element, Width, kTile, Traits::kThreads>(tiles, lists, p, batch, head, kv_head,
                                                                        first_row, thread, lane, step);
  const float scale[2] = {p.scale, p.scale};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    store_group_fragments<Element, Width>(grad_q[h], p.grad_q, batch, head, first_row + 8 * h, p.seq_q, p.head_dim,
                                          scale, lane);
  }
}

}  // namespace attnkit::cuda::sparse
