// Conversion of an fp32 MMA accumulator tile (scores, probabilities, dP) into the fp16/bf16 A operand
// of the next tensor-core product, in registers (FlashAttention's P = softmax(S) fed to P*V, and the
// backward's P and dS).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attnkit::cuda::fmha {

template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack_pair<cutlass::half_t>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack_pair<cutlass::bfloat16_t>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The float value of a packed 16-bit Element (the low or high half of a pack_pair word).
template <class Element>
__device__ __forceinline__ float unpack_value(uint32_t bits) {
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>) {
    return __uint_as_float(bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

// P (accumulator layout ((2,2), M, N), fp32) -> A operand ((2,2,2), M, N/2) in Element: A value
// (v0, v1, v2) of block (m, k) is accumulator value (v0, v1) of block (m, 2k + v2). The operand
// fragment is a compact column-major register array, so value pair (v0 = 0, 1) of (v1, v2, m, k) is
// 32-bit word v1 + 2*v2 + 4*(m + M*k).
template <class Element, class Acc, class Frag>
__device__ __forceinline__ void convert_scores_to_operand(const Acc& s, Frag& a) {
  using namespace cute;
  constexpr int kM = decltype(size<1>(s))::value;
  static_assert(decltype(size<2>(s))::value == 2 * decltype(size<2>(a))::value, "one A block per two S blocks");
  uint32_t* words = reinterpret_cast<uint32_t*>(raw_pointer_cast(a.data()));
  CUTE_UNROLL
  for (int m = 0; m < size<1>(s); ++m) {
    CUTE_UNROLL
    for (int n = 0; n < size<2>(s); ++n) {
      CUTE_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        words[v1 + 2 * (n % 2) + 4 * (m + kM * (n / 2))] = pack_pair<Element>(s(2 * v1, m, n), s(2 * v1 + 1, m, n));
      }
    }
  }
}

}  // namespace attnkit::cuda::fmha
