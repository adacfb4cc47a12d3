// The last step of fast mode's dQ (p.accumulate_dq): d_q = scale * dq_accum, row by row of each Q tile.
//
// Two ways to run it. Large problems launch fmha_backward_dq_convert_kernel after the dK/dV kernel, one
// CTA per (Q tile, query head, batch). Small ones (fuses_dq_convert, fmha_backward_params.hpp: at most
// kFusedDqConvertElements accumulator elements, e.g. a few Q tiles of one head) convert inside the dK/dV kernel
// instead, which saves a launch and its host time (a few microseconds, most of such a call): every dK/dV CTA, once its
// additions are complete, counts itself on p.dq_done (workspace, zeroed with the accumulator) after a
// release fence, and the CTA that arrives last (the count equals the grid) converts the whole
// accumulator with its threads, reading it through L2 after an acquire fence. The accumulator is small by
// construction, so one CTA's pass costs about what the launch it replaces would.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

// d_q = scale * dq_accum on the rows of Q tile q_linear of (batch, head): `threads` threads (a multiple of
// the compiled head dim / 8), this one `thread`, each converting 8-column chunks (two 16-byte loads, one
// 16-byte store).
template <class Traits>
__device__ __forceinline__ void convert_dq_tile(const FmhaBackwardParams& p, int32_t q_linear, int32_t head,
                                                int32_t batch, int thread, int threads) {
  using Element = typename Traits::Element;
  static_assert(sizeof(Element) == 2, "8 elements per 16-byte chunk");
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;
  const DecodedTile tile = decode_tile(p, q_linear, p.q_tiles, p.q_space, p.kv_space, true);
  const int col = (thread % kChunksPerRow) * 8;
  if (!tile.valid || col >= p.head_dim) return;
  const int rows_per_pass = threads / kChunksPerRow;
  const int64_t accum_head = batch * p.dq_accum.batch_stride + head * p.dq_accum.head_stride;
  const int64_t dq_head = batch * p.d_q.batch_stride + head * p.d_q.head_stride;
  const float* accum = static_cast<const float*>(p.dq_accum.data);
  for (int row = thread / kChunksPerRow; row < Traits::kBlockM; row += rows_per_pass) {
    const RowToken t = row_token(p.q_space, p.dilation, tile.origin, row);
    if (!t.valid) continue;
    const float4* from = reinterpret_cast<const float4*>(accum + accum_head + token_offset(p.dq_accum, t) + col);
    const float4 lo = __ldcg(from);
    const float4 hi = __ldcg(from + 1);
    const float values[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    alignas(16) Element out[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = static_cast<Element>(values[e] * p.scale);
    Element* to = static_cast<Element*>(p.d_q.data) + dq_head + token_offset(p.d_q, t) + col;
    *reinterpret_cast<uint4*>(to) = *reinterpret_cast<const uint4*>(out);
  }
}

template <class Traits>
__global__ void __launch_bounds__(128) fmha_backward_dq_convert_kernel(const __grid_constant__ FmhaBackwardParams p) {
  convert_dq_tile<Traits>(p, static_cast<int32_t>(blockIdx.x), static_cast<int32_t>(blockIdx.y),
                          static_cast<int32_t>(blockIdx.z), static_cast<int>(threadIdx.x), 128);
}

// The fused convert's end of a dK/dV CTA (p.dq_done set): called once by `threads` threads of every CTA
// (this one `thread`), each after its own dQ additions have completed (TMA reductions waited for);
// `sync()` is a barrier over exactly these threads. The last CTA to arrive converts every Q tile.
template <class Traits, class Sync>
__device__ __forceinline__ void convert_dq_if_last_cta(const FmhaBackwardParams& p, int thread, int threads,
                                                       Sync sync) {
  __shared__ uint32_t last_cta;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;\n" ::: "memory");  // the TMA unit's additions, before the release
#endif
  __threadfence();
  sync();
  if (thread == 0) {
    const uint32_t ctas = gridDim.x * gridDim.y * gridDim.z;
    last_cta = atomicAdd(p.dq_done, 1u) + 1u == ctas ? 1u : 0u;
  }
  sync();
  if (last_cta == 0u) return;
  __threadfence();  // every other CTA's additions happened before its count: read them after ours
  const int64_t tiles = static_cast<int64_t>(p.batch) * p.heads_q * p.total_q_tiles;
  for (int64_t i = 0; i < tiles; ++i) {
    const auto q_linear = static_cast<int32_t>(i % p.total_q_tiles);
    const auto head = static_cast<int32_t>((i / p.total_q_tiles) % p.heads_q);
    const auto batch = static_cast<int32_t>(i / (static_cast<int64_t>(p.total_q_tiles) * p.heads_q));
    convert_dq_tile<Traits>(p, q_linear, head, batch, thread, threads);
  }
}

}  // namespace attnkit::cuda::fmha
