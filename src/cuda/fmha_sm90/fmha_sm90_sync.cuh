// Synchronisation primitives of the Hopper kernels: shared-memory mbarriers (phase-parity waits),
// named barriers for one warpgroup, the generic -> async proxy fence that must separate cp.async
// writes of a tile from the wgmma reads of it, and the warpgroup register reallocation.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/named_barrier.cuh"

namespace attnkit::cuda::fmha_sm90 {

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)), "r"(arrivals));
}

// Makes the initialisations visible before any thread uses the barriers (followed by __syncthreads).
__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::); }

__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n}\n" ::"r"(
                   shared_address(barrier))
               : "memory");
}

// Waits until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      "wait_loop:\n"
      " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_loop;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// Orders this thread's completed generic-proxy shared writes (cp.async included) before later
// async-proxy accesses (wgmma operand reads) that are synchronised with it.
__device__ __forceinline__ void fence_generic_to_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

template <int Registers>
__device__ __forceinline__ void warpgroup_registers_shrink() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void warpgroup_registers_grow() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

}  // namespace attnkit::cuda::fmha_sm90
