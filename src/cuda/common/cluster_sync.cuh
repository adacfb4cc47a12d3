// Thread-block cluster primitives (SM90): the CTA's rank in its cluster, the whole cluster's barrier, an arrival on the
// mbarrier at the same shared offset in another CTA of the cluster, and a phase wait that acquires at cluster scope
// (what those remote arrivals released).
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"

namespace attnkit::cuda {

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// CTAs in the cluster.
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t size;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(size));
  return size;
}

// Every thread of every CTA of the cluster (all threads of each warp) arrives and waits.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// Arrives on the mbarrier of CTA `rank` of the cluster at the shared offset of `barrier` in this CTA.
__device__ __forceinline__ void cluster_barrier_arrive(uint64_t* barrier, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(shared_address(barrier)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// Waits until the phase with parity `parity` of this CTA's `barrier` has completed, acquiring at cluster scope.
__device__ __forceinline__ void cluster_barrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      "cluster_wait_loop:\n"
      " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra cluster_wait_loop;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

}  // namespace attnkit::cuda
