#include <cutlass/numeric_types.h>

#include "cuda/retention/retention_wgmma_matrix_instances.cuh"

namespace attnkit::cuda::retention {

const ChunkKernel* wgmma_matrix_kernels_bf16(int* count) {
  return wgmma_matrix_kernel_table<cutlass::bfloat16_t>(DType::bf16, count);
}

}  // namespace attnkit::cuda::retention
