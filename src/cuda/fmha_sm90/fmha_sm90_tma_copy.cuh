// Device side of the TMA tile loads (maps from fmha_sm90_tma.hpp): one elected producer thread
// announces the bytes a stage will receive (mbarrier expect-tx) and issues one bulk tensor copy per
// 64-column chunk; the copies complete the transaction on the stage's full barrier themselves. Also
// the bulk tensor reductions (shared -> global fp32 adds) of the backward's dQ and their bulk-group waits.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/shared_access.cuh"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

namespace attnkit::cuda::fmha_sm90 {

__device__ __forceinline__ void barrier_arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Copies the box at coordinates c (innermost first, `rank` of them) of `map` to shared `destination`,
// completing on `barrier`.
__device__ __forceinline__ void tma_load_box(const CUtensorMap* map, void* destination, uint64_t* barrier, int rank,
                                             const int32_t (&c)[5]) {
  const uint64_t descriptor = reinterpret_cast<uint64_t>(map);
  const uint32_t to = shared_address(destination);
  const uint32_t bar = shared_address(barrier);
  if (rank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(to),
        "l"(descriptor), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(bar)
        : "memory");
  } else if (rank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(to),
        "l"(descriptor), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(bar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5, %6}], [%7];\n" ::"r"(to),
        "l"(descriptor), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(bar)
        : "memory");
  }
}

// The global box at coordinates c of `map` (innermost first, `rank` of them) += the shared box `source`
// (the map's element type, here fp32), performed by the TMA unit in this thread's current bulk group;
// elements out of the tensor's bounds are left alone. The shared source must have been written before a
// fence_generic_to_async_shared() and a barrier with its writers.
__device__ __forceinline__ void tma_reduce_add_box(const CUtensorMap* map, const void* source, int rank,
                                                   const int32_t (&c)[5]) {
  const uint64_t descriptor = reinterpret_cast<uint64_t>(map);
  const uint32_t from = shared_address(source);
  if (rank == 3) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                     descriptor),
                 "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(from)
                 : "memory");
  } else if (rank == 4) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
            descriptor),
        "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(from)
        : "memory");
  } else {
    asm volatile(
        "cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n" ::"l"(
            descriptor),
        "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(from)
        : "memory");
  }
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until this thread's bulk groups have finished reading their shared sources (the buffers may be
// rewritten).
__device__ __forceinline__ void bulk_wait_sources_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until this thread's bulk groups have completed (their global writes are performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// The coordinates of a tile's first box in a map of shape_of()'s view (fmha_sm90_tma.cpp): (column 0,
// head, token coordinates innermost first, batch), the batch folded into the outermost token coordinate
// (`outer_extent` of them per batch) or a coordinate of its own as the map says. A token coordinate is
// the tile origin's index in its dilation group times the dilation plus the group (the map steps by the
// dilation).
__device__ __forceinline__ void box_coordinates(int dims, const int32_t (&dilation)[fmha::kMaxDims],
                                                int32_t outer_extent, bool fold_batch, bool has_batch,
                                                const fmha::TileOrigin& origin, int32_t head, int32_t batch,
                                                int32_t (&c)[5]) {
  static_assert(fmha::kMaxDims == 3, "coordinates 2..4: up to three token dimensions and the batch");
  c[0] = 0;
  c[1] = head;
  // Coordinate 2 + k: token dimension dims - 1 - k, then the outermost one (k = dims - 1), then the batch.
  // Selected with constant indices only (an array indexed at run time would live in local memory).
  int32_t token[fmha::kMaxDims];
#pragma unroll
  for (int d = 0; d < fmha::kMaxDims; ++d) token[d] = origin.index[d] * dilation[d] + origin.group[d];
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    int32_t value = 0;
#pragma unroll
    for (int d = 1; d < fmha::kMaxDims; ++d) {
      if (k < dims - 1 && d == dims - 1 - k) value = token[d];
    }
    if (k == dims - 1) value = token[0] + (fold_batch ? batch * outer_extent : 0);
    if (k == dims && has_batch) value = batch;
    c[2 + k] = value;
  }
}

// A KV tile's first chunk in the forward's K / V maps.
__device__ __forceinline__ void tile_coordinates(const Sm90TileMaps& maps, const fmha::FmhaParams& p,
                                                 const fmha::TileOrigin& origin, int32_t head_kv, int32_t batch,
                                                 int32_t (&c)[5]) {
  box_coordinates(p.dims, p.dilation, p.kv_space.extent[0], maps.fold_batch != 0, maps.has_batch != 0, origin, head_kv,
                  batch, c);
}

}  // namespace attnkit::cuda::fmha_sm90
