// Backward preprocessing: per query row, delta = rowsum(dO * O) in fp32 and the forward's LSE in log2
// units, written in the tile-row order of fmha_backward_params.hpp so the main kernels load a Q tile's
// statistics with a few 16-byte copies.
//
// One CTA of 4 warps per (Q tile, query head, batch), the main kernels' Q tile enumeration. A row's dO
// and O are read in 16-byte chunks by a group of lanes, the smallest power of two that covers Dv
// (4 lanes at Dv = 32, 8 at 64, 16 at 128, 32 at 256), so a warp takes 32 / group rows at once; each
// warp first issues the loads of up to four such steps (and the rows' LSE), then reduces the products
// within each group with shuffles and stores. Many loads are in flight per warp, where one row per warp
// at a time left the kernel waiting on memory latency: 3-5x its bandwidth floor on short head dims
// (docs/perf.md). Rows past the extents, and rows whose LSE is -inf (no key attended), get
// lse_log2 = +inf so that their probabilities come out as exactly 0.
// In fast mode the grid also zeroes the dQ accumulator (p.zero_fill), a grid-stride loop of 16-byte
// stores over all CTAs, so that no separate memset launch precedes the dK/dV kernel.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"

namespace attnkit::cuda::fmha {

template <class Element>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const Element* x = reinterpret_cast<const Element*>(&a);
  const Element* y = reinterpret_cast<const Element*>(&b);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum = fmaf(static_cast<float>(x[i]), static_cast<float>(y[i]), sum);
  return sum;
}

template <class Traits>
__global__ void __launch_bounds__(128) fmha_backward_preprocess_kernel(const __grid_constant__ FmhaBackwardParams p) {
  using Element = typename Traits::Element;
  static_assert(sizeof(Element) == 2, "8 elements per 16-byte chunk");
  constexpr int kWarps = 4;
  constexpr int kStepsPerBatch = 4;  // row steps whose loads a warp issues before reducing any
  const int32_t q_linear = static_cast<int32_t>(blockIdx.x);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  if (p.zero_fill_chunks > 0) {
    const int64_t cta = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
    const int64_t threads = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
    uint4* chunks = static_cast<uint4*>(p.zero_fill);
    for (int64_t i = cta * blockDim.x + threadIdx.x; i < p.zero_fill_chunks; i += threads) {
      chunks[i] = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  const DecodedTile tile = decode_tile(p, q_linear, p.q_tiles, p.q_space, p.kv_space, true);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  // Lanes per row: the power of two covering Dv's chunks (Dv <= 256: at most 32).
  const int chunks = (p.head_dim_v + 7) / 8;
  int group_lanes = 1;
  while (group_lanes < chunks) group_lanes *= 2;
  const int rows_per_step = 32 / group_lanes;
  const int group = lane / group_lanes;
  const int col = (lane % group_lanes) * 8;
  const bool reports = lane % group_lanes == 0;
  const int64_t o_head = batch * p.o.batch_stride + head * p.o.head_stride;
  const int64_t do_head = batch * p.d_o.batch_stride + head * p.d_o.head_stride;
  const int64_t lse_head = batch * p.lse.batch_stride + head * p.lse.head_stride;
  const int64_t out_base =
      ((static_cast<int64_t>(batch) * p.heads_q + head) * p.total_q_tiles + q_linear) * Traits::kBlockM;
  const int rows_per_batch = kWarps * rows_per_step * kStepsPerBatch;
  for (int first = 0; first < Traits::kBlockM; first += rows_per_batch) {
    uint4 o[kStepsPerBatch], d[kStepsPerBatch];
    float lse[kStepsPerBatch];
    bool valid[kStepsPerBatch];
#pragma unroll
    for (int s = 0; s < kStepsPerBatch; ++s) {
      const int row = first + (s * kWarps + warp) * rows_per_step + group;
      const RowToken t = row_token(p.q_space, p.dilation, tile.origin, row);
      valid[s] = row < Traits::kBlockM && tile.valid && t.valid;
      o[s] = d[s] = make_uint4(0u, 0u, 0u, 0u);
      lse[s] = -INFINITY;
      if (valid[s] && col < p.head_dim_v) {
        o[s] = *reinterpret_cast<const uint4*>(static_cast<const Element*>(p.o.data) + o_head + token_offset(p.o, t) +
                                               col);
        d[s] = *reinterpret_cast<const uint4*>(static_cast<const Element*>(p.d_o.data) + do_head +
                                               token_offset(p.d_o, t) + col);
      }
      if (valid[s] && reports) lse[s] = static_cast<const float*>(p.lse.data)[lse_head + token_offset(p.lse, t)];
    }
#pragma unroll
    for (int s = 0; s < kStepsPerBatch; ++s) {
      float sum = dot8<Element>(o[s], d[s]);
      for (int offset = group_lanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      const int row = first + (s * kWarps + warp) * rows_per_step + group;
      if (reports && row < Traits::kBlockM) {
        p.lse_log2[out_base + row] = lse[s] == -INFINITY ? INFINITY : lse[s] * 1.4426950408889634f;
        p.delta[out_base + row] = valid[s] ? sum : 0.f;
      }
    }
  }
}

}  // namespace attnkit::cuda::fmha
