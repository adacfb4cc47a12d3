// The fallback GEMM of the CUDA backend: correct for every problem the API accepts (any M, N, K, any
// strides and addresses, broadcast batches, fp32 / fp16 / bf16), on any CUDA device. It runs what the
// tensor-core kernels cannot take (an address or leading dimension that is not 16-byte aligned, an
// extent beyond their 32-bit problem shape, fp32 without a 3xTF32 kernel in the build) and the
// problems whose product is zero (k == 0 or alpha == 0: C = beta * C without reading A or B).
#pragma once
#include "cuda/gemm/gemm_kernel.hpp"

namespace attnkit::cuda::gemm {

// The SIMT entry for `dtype` (f32, f16, bf16).
const GemmKernel& simt_gemm_kernel(DType dtype);

}  // namespace attnkit::cuda::gemm
