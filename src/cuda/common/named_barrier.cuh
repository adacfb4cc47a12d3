// Named CTA barriers (bar.sync / bar.arrive with an id and a thread count) for kernels whose warps take
// different roles: each role reaches the barrier from its own code, which __syncthreads does not allow.
#pragma once

namespace attnkit::cuda {

// Barrier among the `threads` threads (whole warps) that use barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` without waiting (the other `threads` - this warp's share wait with bar.sync).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace attnkit::cuda
