// Preprocess of the scattered-sparse backward: per (batch, query head, query) the base-2 lse
// (lse * log2 e, -inf kept) and delta = rowsum(dO * O) in fp32, into workspace rows of row_pitch floats
// (rows past seq_q get 0), so that the dQ and dK/dV kernels read both as contiguous fp32 arrays.
// One thread per row: 2 Dv element reads of 16-byte chunks each, 8 bytes written.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/sparse/scattered_launch.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int kPreprocessThreads = 256;

__device__ __forceinline__ float2 to_float2(__half2 x) { return __half22float2(x); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 x) { return __bfloat1622float2(x); }

template <class Pair>
__global__ void __launch_bounds__(kPreprocessThreads)
    scattered_backward_preprocess_kernel(const ScatteredBackwardParams p) {
  const int64_t index = int64_t{blockIdx.x} * kPreprocessThreads + threadIdx.x;
  const int64_t total = int64_t{p.batch} * p.heads_q * p.row_pitch;
  if (index >= total) return;
  const int32_t row = static_cast<int32_t>(index % p.row_pitch);
  const int32_t head = static_cast<int32_t>((index / p.row_pitch) % p.heads_q);
  const int32_t batch = static_cast<int32_t>(index / (int64_t{p.row_pitch} * p.heads_q));
  if (row >= p.seq_q) {
    p.lse_log2[index] = 0.0f;
    p.delta[index] = 0.0f;
    return;
  }
  const auto* out =
      reinterpret_cast<const uint4*>(static_cast<const Pair*>(p.out.data) + p.out.offset(batch, row, head) / 2);
  const auto* grad_out = reinterpret_cast<const uint4*>(static_cast<const Pair*>(p.grad_out.data) +
                                                        p.grad_out.offset(batch, row, head) / 2);
  float sum = 0.0f;
  for (int chunk = 0; chunk < p.head_dim_v / 8; ++chunk) {
    const uint4 a = out[chunk];
    const uint4 b = grad_out[chunk];
    const uint32_t as[4] = {a.x, a.y, a.z, a.w};
    const uint32_t bs[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = to_float2(*reinterpret_cast<const Pair*>(&as[i]));
      const float2 y = to_float2(*reinterpret_cast<const Pair*>(&bs[i]));
      sum += x.x * y.x + x.y * y.y;
    }
  }
  const float lse = static_cast<const float*>(p.lse.data)[p.lse.offset(batch, row, head)];
  p.lse_log2[index] = lse * 1.4426950408889634f;
  p.delta[index] = sum;
}

}  // namespace

void launch_scattered_backward_preprocess(const ScatteredBackwardParams& p, DType dtype, cudaStream_t stream) {
  const int64_t total = int64_t{p.batch} * p.heads_q * p.row_pitch;
  if (total == 0) return;
  const auto blocks = static_cast<unsigned>((total + kPreprocessThreads - 1) / kPreprocessThreads);
  if (dtype == DType::f16) {
    scattered_backward_preprocess_kernel<__half2><<<blocks, kPreprocessThreads, 0, stream>>>(p);
  } else {
    scattered_backward_preprocess_kernel<__nv_bfloat162><<<blocks, kPreprocessThreads, 0, stream>>>(p);
  }
  check_launch("scattered_backward_preprocess_kernel");
}

}  // namespace attnkit::cuda::sparse
