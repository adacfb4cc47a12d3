// Shared-memory accesses at 32-bit shared addresses (shared_address() of async_copy.cuh), for code whose
// addresses the compiler would otherwise keep as 64-bit generic pointers (generic loads and stores, and
// register pressure where it hoists them).
#pragma once
#include <cstdint>

namespace attnkit::cuda {

// A 32-bit word (4-byte aligned address).
__device__ __forceinline__ void store_shared_word(uint32_t address, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

// Two floats (8-byte aligned address).
__device__ __forceinline__ void store_shared_pair(uint32_t address, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(a), "f"(b) : "memory");
}

// 16 bytes (16-byte aligned address).
__device__ __forceinline__ uint4 load_shared_chunk(uint32_t address) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

}  // namespace attnkit::cuda
