#include "cuda/retention/retention_chunk_instances.cuh"

namespace attnkit::cuda::retention {

const ChunkKernel* chunk_kernels_bf16(int* count) { return chunk_kernel_table<__nv_bfloat16>(DType::bf16, count); }

const ChunkKernel* decode_kernels_bf16(int* count) { return decode_kernel_table<__nv_bfloat16>(DType::bf16, count); }

const ChunkKernel* normalized_kernels_bf16(int* count) {
  return normalized_kernel_table<__nv_bfloat16>(DType::bf16, count);
}

}  // namespace attnkit::cuda::retention
