// Device side of the backward's KV-parallel splitting (fmha_backward_split.hpp): which part of its KV
// tile's visits a dK/dV CTA runs, the fp32 partial stores of split CTAs, and the kernel that sums the
// partials in split order and writes dK and dV.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/fmha/fmha_backward_dq_order.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

// This CTA's KV tile and split: blockIdx.x = rank * kv_splits + split, the tile's rank in the launch
// order (p.kv_order: heaviest first in the grid's last (batch, KV head) pairs, where the host ordered them;
// descending positions for ordered dQ, fmha_backward_dq_order.hpp).
struct KvSplitCta {
  int32_t tile;
  int32_t split;
};

__device__ __forceinline__ KvSplitCta kv_split_cta(const FmhaBackwardParams& p) {
  const int32_t x = static_cast<int32_t>(blockIdx.x);
  const int32_t rank = x / p.kv_splits;
  const KvTileOrder& order = p.kv_order;
  if (order.descending) return KvSplitCta{descending_launch_tile(rank, p.kv_tiles), x % p.kv_splits};
  // The linear (batch, KV head) index of the CTA's first KV head.
  const int32_t head = static_cast<int32_t>(blockIdx.z * p.heads_kv + blockIdx.y * p.heads_per_cta);
  const int32_t tile = order.positions == 0 || head < order.first_head
                           ? rank
                           : (rank % order.groups) * order.positions + order.position[rank / order.groups];
  return KvSplitCta{tile, x % p.kv_splits};
}

// The visits [first, first + count) of a schedule of `total` visits that split `split` runs: the first
// total % kv_splits splits one more than the others. 32-bit divisions only (a 64-bit one is a called
// subroutine, whose calling convention made the Hopper kernel spill 7 times more).
struct VisitRange {
  int first;
  int count;
};

__device__ __forceinline__ VisitRange split_visit_range(const FmhaBackwardParams& p, int32_t split, int total) {
  const int base = total / p.kv_splits;
  const int extra = total % p.kv_splits;
  return VisitRange{split * base + min(split, extra), base + (split < extra ? 1 : 0)};
}

// Stores an fp32 accumulator tile (Rows x Width of the thread's `thread_mma` partition) unscaled into
// the row-major partial slab `slab` (Width floats per row).
template <int Rows, int Width, class ThreadMma, class Acc>
__device__ __forceinline__ void store_partial_tile(const ThreadMma& thread_mma, const Acc& acc, float* slab) {
  using namespace cute;
  Tensor g = make_tensor(make_gmem_ptr(slab),
                         make_layout(make_shape(Int<Rows>{}, Int<Width>{}), make_stride(Int<Width>{}, Int<1>{})));
  Tensor t = thread_mma.partition_C(g);
  static_assert(decltype(size(t))::value == decltype(size(acc))::value, "the partition matches the accumulator");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) t(i) = acc(i);
}

// Sums the kv_splits partial slabs of a KV tile in split order (the same order every run), scales dK by
// the softmax scale and writes dK and dV as 16-byte chunks: one CTA of 128 threads per (KV tile, KV
// head, batch), a thread one 8-column chunk of a row per step.
template <class Traits>
__global__ void __launch_bounds__(128) fmha_backward_dkdv_reduce_kernel(const __grid_constant__ FmhaBackwardParams p) {
  using Element = typename Traits::Element;
  static_assert(sizeof(Element) == 2, "8 elements per 16-byte chunk");
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kChunksPerRow = Traits::kHeadDim / 8;
  constexpr int kChunksPerTile = kBlockN * kChunksPerRow;
  const int32_t tile = static_cast<int32_t>(blockIdx.x);
  const int32_t head_kv = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const DecodedTile kv = decode_tile(p, tile, p.kv_tiles, p.kv_space, p.q_space, false);
  if (!kv.valid) return;
  const int64_t slab = kv_partial_offset(p, 0, batch, head_kv, tile, kBlockN);
  const int64_t split_stride = kv_partial_offset(p, 1, batch, head_kv, tile, kBlockN) - slab;
  for (int item = static_cast<int>(threadIdx.x); item < 2 * kChunksPerTile; item += 128) {
    const bool is_dv = item >= kChunksPerTile;
    const int row = (item % kChunksPerTile) / kChunksPerRow;
    const int col = (item % kChunksPerRow) * 8;
    if (col >= (is_dv ? p.head_dim_v : p.head_dim)) continue;
    const TensorAddress& out = is_dv ? p.d_v : p.d_k;
    Element* to = tile_row_output<Element>(out, batch * out.batch_stride + head_kv * out.head_stride, p.kv_space,
                                           p.dilation, kv.origin, row);
    if (to == nullptr) continue;
    const float* from = (is_dv ? p.dv_partial : p.dk_partial) + slab + row * p.partial_width + col;
    float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < p.kv_splits; ++s, from += split_stride) {
      const float4 lo = reinterpret_cast<const float4*>(from)[0];
      const float4 hi = reinterpret_cast<const float4*>(from)[1];
      const float values[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) sum[e] += values[e];
    }
    const float scale = is_dv ? 1.f : p.scale;
    alignas(16) Element chunk[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) chunk[e] = static_cast<Element>(sum[e] * scale);
    *reinterpret_cast<uint4*>(to + col) = *reinterpret_cast<const uint4*>(chunk);
  }
}

}  // namespace attnkit::cuda::fmha
