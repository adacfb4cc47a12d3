// opaque(x): x, which the compiler may no longer assume equal to the x it was. What a kernel computes from it inside
// its main loop is recomputed there (a few instructions) rather than hoisted before the loop into a register held
// through every MMA.
#pragma once
#include <cstdint>

namespace attnkit::cuda {

__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ float opaque(float x) {
  asm volatile("" : "+f"(x));
  return x;
}
template <class T>
__device__ __forceinline__ T* opaque(T* x) {
  asm volatile("" : "+l"(x));
  return x;
}

}  // namespace attnkit::cuda
