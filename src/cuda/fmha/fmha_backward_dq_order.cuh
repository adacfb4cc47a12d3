// Device side of the ordered dQ additions' order (fmha_backward_dq_order.hpp): the box policies' table of
// visitor bounds, one thread per (dimension, dilation group, Q tile position), and a visit's rank from it
// (or, for tile lists, from the list builder's rank table).
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_dq_order.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"

namespace attnkit::cuda::fmha {

// A template (on the launcher's tile traits) so that every instantiation file may hold its own copy.
template <class Traits>
__global__ void __launch_bounds__(128)
    fmha_backward_visitor_bounds_kernel(const __grid_constant__ FmhaBackwardParams p, VisitorBounds* bounds) {
  int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= visitor_bounds_count(p)) return;
  VisitorBounds* out = bounds + x;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    const int64_t entries = int64_t{p.dilation[d]} * p.q_tiles[d];
    if (d < p.dims && x >= 0 && x < entries) {
      const int32_t group = static_cast<int32_t>(x / p.q_tiles[d]);
      *out = visitor_bounds_of(p, d, (x % p.q_tiles[d]) << p.q_space.box_log2[d],
                               indices_in_group(p.q_space, d, p.dilation[d], group),
                               indices_in_group(p.kv_space, d, p.dilation[d], group));
    }
    x -= entries;
  }
}

// Visit v's rank among the KV tiles that meet its Q tile (seen from the KV tile `kv` of `batch`).
template <bool kLists>
__device__ __forceinline__ uint32_t visit_dq_rank(const FmhaBackwardParams& p, const DecodedTile& kv, int32_t batch,
                                                  const QVisit& v) {
  if constexpr (kLists) {
    const BackwardTileLists& l = p.list;
    const int64_t mask_row =
        static_cast<int64_t>(l.mask_batch > 1 ? batch : 0) * l.mask_heads + (l.mask_heads > 1 ? v.head : 0);
    return p.dq_turn_table[(mask_row * l.q_tiles + v.q_linear) * l.kv_tiles + kv.position[0]];
  } else {
    int32_t first[kMaxDims] = {0, 0, 0};
    int32_t end[kMaxDims] = {1, 1, 1};
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < p.dims) {
        const VisitorBounds b =
            p.visitor_bounds[visitor_bounds_index(p, d, v.origin.group[d], v.origin.index[d] >> p.q_space.box_log2[d])];
        first[d] = b.first;
        end[d] = b.end;
      }
    }
    return descending_visitor_rank(p.dims, first, end, kv.position);
  }
}

}  // namespace attnkit::cuda::fmha
