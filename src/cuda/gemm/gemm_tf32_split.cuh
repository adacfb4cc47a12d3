// The 3xTF32 operand split, shared by the Hopper 3xTF32 mainloop (gemm_sm90_3xtf32_mainloop.cuh) and the narrow
// 3xTF32 kernel (gemm_narrow_3xtf32.cu): x = big + small, big = x rounded to nearest at TF32's 10 mantissa bits, small
// = x - big (exact in fp32) rounded likewise; a product is then small_a big_b + big_a small_b + big_a big_b, three
// TF32 products (small_a small_b, below 2^-22 of it, is dropped): fp32-level error.
#pragma once
#include <cstdint>

namespace attnkit::cuda::gemm {

// x rounded to nearest (ties away from zero) at TF32's 10 mantissa bits, as an fp32 value.
__device__ __forceinline__ float round_to_tf32(float x) {
  uint32_t bits = 0;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
}

// The big and small parts of x.
__device__ __forceinline__ void split_tf32(float x, float& big, float& small) {
  big = round_to_tf32(x);
  small = round_to_tf32(x - big);
}

}  // namespace attnkit::cuda::gemm
