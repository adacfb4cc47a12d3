// Asynchronous global->shared copies (cp.async, SM80+) of 16-byte chunks (and 4-byte words) with zero fill, and the
// group commit/wait that forms the kernels' load pipelines. A predicated-off chunk is written as zeros
// (source size 0) so shared tiles never hold stale data past the tensor's edge.
#pragma once
#include <cstdint>

namespace attnkit::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Copies 16 bytes from `source` to shared address `destination`, or writes 16 zero bytes when !valid
// (source is then not read, but must still be a mapped address; callers pass the tensor base).
__device__ __forceinline__ void copy_16_bytes_async(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source), "r"(source_bytes));
}

// Copies the first `source_bytes` (0 to 16) bytes of a 16-byte chunk and zero-fills the rest: a chunk that ends past
// a tensor's last element reads only the bytes inside it.
__device__ __forceinline__ void copy_16_bytes_async_prefix(uint32_t destination, const void* source, int source_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source), "r"(source_bytes));
}

// The same for 4 bytes (4-byte aligned addresses).
__device__ __forceinline__ void copy_4_bytes_async(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(source), "r"(source_bytes));
}

__device__ __forceinline__ void commit_async_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

}  // namespace attnkit::cuda
