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

}  // namespace attnkit::cuda::retention
