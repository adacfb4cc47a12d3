#include "cuda/retention/retention_parallel_backward_instances.cuh"

namespace attnkit::cuda::retention {

const ChunkKernel* parallel_backward_kernels_f16(int* count) {
  return parallel_backward_kernel_table<__half>(DType::f16, count);
}

}  // namespace attnkit::cuda::retention
