// Backward kernels (dQ, then dK/dV) of the scattered-sparse path for f16 inputs (every compiled width).
#include <cuda_fp16.h>

#include "cuda/sparse/scattered_kernel_launch.cuh"

namespace attnkit::cuda::sparse {

void launch_scattered_backward_f16(const ScatteredBackwardParams& p, int width, int max_shared_bytes, bool hopper,
                                   cudaStream_t stream) {
  launch_backward_for<__half>(p, width, max_shared_bytes, hopper, stream);
}

}  // namespace attnkit::cuda::sparse
