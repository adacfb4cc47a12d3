#include <cutlass/numeric_types.h>

#include "cuda/retention/retention_wgmma_matrix_instances.cuh"

namespace attnkit::cuda::retention {

const ChunkKernel* wgmma_matrix_kernels_f16(int* count) {
  return wgmma_matrix_kernel_table<cutlass::half_t>(DType::f16, count);
}

}  // namespace attnkit::cuda::retention
