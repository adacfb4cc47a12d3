// The decay of a retention head on the device, shared by the retention kernels: log2(gamma_h) from ChunkParams (the
// per-head values, or the default gamma_h = 1 - 2^(-5-h)) and gamma^n for a real exponent n.
#pragma once
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

// log2(gamma_h): from the params, or the default 1 - 2^(-5-h) computed here.
__device__ __forceinline__ float head_log2_gamma(const ChunkParams& p, int h) {
  if (p.default_gamma) return static_cast<float>(log1p(-exp2(-5.0 - h)) / 0.69314718055994530942);
  return p.log2_gamma[h];
}

// gamma^n for a real exponent n.
__device__ __forceinline__ float decay_power(float log2_gamma, float n) { return exp2f(n * log2_gamma); }

// A chunk's score after the decay mask: scale * gamma^(i - j) * score for key j <= query i, else 0. Branch-free: the
// power is computed for every element (the exponent clamped at 0 above the diagonal, so it never overflows; a power
// below 2^-126 flushes to 0) by an exponential the compiler may not move into a branch, and the mask is a select. A
// thread's elements are thus independent and their exponentials pipeline, where a branch per element (what the
// compiler makes of `j <= i ? score * scale * decay_power(...) : 0`) runs them one after another.
__device__ __forceinline__ float masked_decayed_score(float score, float log2_gamma, int i, int j, float scale) {
  const int n = i - j;
  float power;
  asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(power) : "f"(static_cast<float>(n > 0 ? n : 0) * log2_gamma));
  return n >= 0 ? score * scale * power : 0.0f;
}

}  // namespace attnkit::cuda::retention
