// Backward kernels (dQ, then dK/dV) of the scattered-sparse path for bf16 inputs (every compiled width).
#include <cuda_bf16.h>

#include "cuda/sparse/scattered_kernel_launch.cuh"

namespace attnkit::cuda::sparse {

void launch_scattered_backward_bf16(const ScatteredBackwardParams& p, int width, const ScatteredDevice& device,
                                    cudaStream_t stream) {
  launch_backward_for<__nv_bfloat16>(p, width, device, stream);
}

}  // namespace attnkit::cuda::sparse
