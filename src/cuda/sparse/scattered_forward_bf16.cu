// Forward kernels of the scattered-sparse path for bf16 inputs (every compiled width).
#include <cuda_bf16.h>

#include "cuda/sparse/scattered_kernel_launch.cuh"

namespace attnkit::cuda::sparse {

void launch_scattered_forward_bf16(const ScatteredForwardParams& p, int32_t batch, int width, bool hopper,
                                   cudaStream_t stream) {
  launch_forward_for<__nv_bfloat16>(p, batch, width, hopper, stream);
}

}  // namespace attnkit::cuda::sparse
