// Device side of the TMA tile loads (maps from fmha_sm90_tma.hpp): one elected producer thread
// announces the bytes a stage will receive (mbarrier expect-tx) and issues one bulk tensor copy per
// 64-column chunk; the copies complete the transaction on the stage's full barrier themselves. Also
// the bulk reductions (shared -> global fp32 adds) of the backward's dQ and their bulk-group waits.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
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

// global[0 .. bytes / 4) += shared[0 .. bytes / 4), fp32, performed by the TMA unit (bytes: a multiple
// of 16, both addresses 16-byte aligned), in this thread's current bulk group. The shared source must
// have been written before a fence_generic_to_async_shared() and a barrier with its writers.
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, const float* shared, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
               "r"(shared_address(shared)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until this thread's bulk groups have finished reading their shared sources (the buffers may be
// rewritten).
__device__ __forceinline__ void bulk_wait_sources_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until this thread's bulk groups have completed (their global writes are performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// The coordinates of a KV tile's first chunk: (column 0, KV head, token indices innermost first, batch),
// laid out as make_sm90_kv_maps() described the tensor.
__device__ __forceinline__ void tile_coordinates(const Sm90KvMaps& maps, const fmha::FmhaParams& p,
                                                 const fmha::TileOrigin& origin, int32_t head_kv, int32_t batch,
                                                 int32_t (&c)[5]) {
  int n = 0;
  c[n++] = 0;
  c[n++] = head_kv;
  for (int d = fmha::kMaxDims - 1; d >= 1; --d) {
    if (d < p.dims) c[n++] = origin.index[d];
  }
  c[n++] = origin.index[0] + (maps.fold_batch ? batch * p.kv_space.extent[0] : 0);
  if (maps.has_batch) c[n++] = batch;
  while (n < 5) c[n++] = 0;
}

}  // namespace attnkit::cuda::fmha_sm90
