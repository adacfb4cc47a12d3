// Packs a bool element mask into the bit words the scattered kernels read.
//
// Row-major words: one thread per output word reads the word's 32 mask bytes (two 16-byte loads when the
// row's bytes are 16-byte aligned there, else byte loads), so a warp reads 1 KB of consecutive mask bytes
// and the whole mask is read once: Sq * Sk bytes in, Sq * Sk / 8 bytes out per mask slice. A byte counts
// as true when it is nonzero.
//
// Transposed words (the dK/dV kernel's): the key-major packer shared with the fused backward,
// launch_mask_bits_by_key (cuda/common/mask_bits_by_key.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/mask_bits_by_key.hpp"
#include "cuda/sparse/scattered_launch.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int kPackThreads = 256;

// Four mask bytes -> four bits (byte i -> bit i).
__device__ __forceinline__ uint32_t bits_of_bytes(uint32_t bytes) {
  const uint32_t ones = __vcmpne4(bytes, 0u) & 0x01010101u;
  return ((ones * 0x01020408u) >> 24) & 0xfu;
}

__device__ __forceinline__ const uint8_t* mask_row(const MaskBytes& m, int64_t slice, int32_t row) {
  const int64_t b = slice / m.heads;
  const int64_t h = slice % m.heads;
  return m.data + b * m.stride[0] + h * m.stride[1] + int64_t{row} * m.stride[2];
}

__global__ void __launch_bounds__(kPackThreads) pack_mask_kernel(const MaskBytes m, uint32_t* words, int64_t total) {
  const int32_t words_per_row = words_for(m.columns);
  for (int64_t index = int64_t{blockIdx.x} * kPackThreads + threadIdx.x; index < total;
       index += int64_t{gridDim.x} * kPackThreads) {
    const int32_t word = static_cast<int32_t>(index % words_per_row);
    const int64_t row_index = index / words_per_row;
    const uint8_t* bytes = mask_row(m, row_index / m.rows, static_cast<int32_t>(row_index % m.rows)) + word * 32;
    const int32_t count = min(32, m.columns - word * 32);
    uint32_t bits = 0;
    if (count == 32 && (reinterpret_cast<uintptr_t>(bytes) & 15u) == 0) {
      const uint4 lo = *reinterpret_cast<const uint4*>(bytes);
      const uint4 hi = *reinterpret_cast<const uint4*>(bytes + 16);
      const uint32_t parts[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) bits |= bits_of_bytes(parts[i]) << (4 * i);
    } else {
      for (int i = 0; i < count; ++i) bits |= (bytes[i] != 0 ? 1u : 0u) << i;
    }
    words[index] = bits;
  }
}

}  // namespace

void launch_pack_mask(const MaskBytes& mask, uint32_t* words, cudaStream_t stream) {
  const int64_t total = int64_t{mask.batches} * mask.heads * mask.rows * words_for(mask.columns);
  if (total == 0) return;
  const int64_t blocks = (total + kPackThreads - 1) / kPackThreads;
  const int grid = static_cast<int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  pack_mask_kernel<<<grid, kPackThreads, 0, stream>>>(mask, words, total);
  check_launch("pack_mask_kernel");
}

void launch_pack_mask_transposed(const MaskBytes& mask, uint32_t* words, cudaStream_t stream) {
  check_cuda(launch_mask_bits_by_key(mask, words, stream), "mask_bits_by_key_kernel");
}

}  // namespace attnkit::cuda::sparse
