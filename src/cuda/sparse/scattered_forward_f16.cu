// Forward kernels of the scattered-sparse path for f16 inputs (every compiled width).
#include <cuda_fp16.h>

#include "cuda/sparse/scattered_kernel_launch.cuh"

namespace attnkit::cuda::sparse {

void launch_scattered_forward_f16(const ScatteredForwardParams& p, int32_t batch, int width, bool hopper,
                                  cudaStream_t stream) {
  launch_forward_for<__half>(p, batch, width, hopper, stream);
}

}  // namespace attnkit::cuda::sparse
