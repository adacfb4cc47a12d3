// The compiled instances of the chunkwise retention kernel (retention_chunk_kernel.cuh), the recurrent
// decode kernel (retention_decode_kernel.cuh), the normalised parallel forward
// (retention_normalized_kernel.cuh) and the parallel form's backward (retention_parallel_backward_common.cuh),
// by element type, head dim Dk and value block (the Dv columns one CTA owns), and their launch. All take
// ChunkParams; each element type's instances are compiled in retention_chunk_instances_<dtype>.cu and
// retention_parallel_backward_instances_<dtype>.cu.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/tensor.hpp"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

struct ChunkKernel {
  const char*
      family;  // "chunk64", "wgmma_chunk64", "decode", "normalized", "normalized_grouped", "wgmma_matrix",
               // "parallel_bwd_query", "parallel_bwd_key", "parallel_bwd_query_grouped" or "parallel_bwd_key_grouped"
  DType dtype;
  int head_dim;     // Dk of the job
  int value_block;  // value columns per CTA; the job's Dv is a multiple of it
  int threads;
  int shared_bytes;
  const void* function;                                       // the __global__ function
  void (*launch)(const ChunkParams&, int64_t, cudaStream_t);  // grid = CTAs, caller checks the launch
  // The chunkwise family only (null for the others): the kernel that runs several jobs in one grid of `CTAs`
  // (retention_params.hpp's ChunkJobs), with the same threads and shared memory, and its launch.
  const void* jobs_function = nullptr;
  void (*launch_jobs)(const ChunkJobs&, int64_t, cudaStream_t) = nullptr;
  // The normalised parallel forward and the parallel form's backward: the (batch, value slice) pairs one CTA computes
  // (4 warps each), sharing the decay matrix's tiles; 1 for every other kernel.
  int members = 1;
  // CTAs a multiprocessor holds at once where registers, not shared memory, set it (the wgmma kernel's launch bound);
  // 0: as many as its shared memory allows (resident_ctas).
  int resident = 0;
};

// The instance for (dtype, Dk, value block), or null when none is compiled.
const ChunkKernel* find_chunk_kernel(DType dtype, int head_dim, int value_block);
// Every compiled instance of the chunkwise kernel, both element types (the tuner's retention spaces
// enumerate their value blocks from it).
std::vector<const ChunkKernel*> chunk_kernels();
// The Hopper chunkwise kernel (retention_wgmma_chunk_kernel.cuh, family "wgmma_chunk64") for (dtype, Dk, value
// block), or null when none is compiled (builds without the sm_90a target have none).
const ChunkKernel* find_wgmma_chunk_kernel(DType dtype, int head_dim, int value_block);
// Whether `kernel` is one of those (its state-only launch cuts segments into parts, ChunkParams::state_splits).
inline bool is_wgmma_chunk_kernel(const ChunkKernel& kernel) {
  return std::strcmp(kernel.family, "wgmma_chunk64") == 0;
}
// The Hopper decay-matrix forward (retention_wgmma_matrix_kernel.cuh): one CTA per (head, 128 query rows, batch, value
// block); null when none is compiled for (dtype, Dk, value block) (builds without the sm_90a target have none).
inline constexpr const char* kWgmmaMatrixFamily = "wgmma_matrix";
const ChunkKernel* find_wgmma_matrix_kernel(DType dtype, int head_dim, int value_block);
inline bool is_wgmma_matrix_kernel(const ChunkKernel& kernel) {
  return std::strcmp(kernel.family, kWgmmaMatrixFamily) == 0;
}
// The recurrent decode kernel (retention_decode_kernel.cuh) for (dtype, Dk): value block 64, or null.
const ChunkKernel* find_decode_kernel(DType dtype, int head_dim);
// The normalised parallel forward (retention_normalized_kernel.cuh) for (dtype, Dk) with `members` (batch, value
// slice) pairs per CTA (1, or kDecayMatrixMembers for the matrix form): value block 64, or null.
const ChunkKernel* find_normalized_kernel(DType dtype, int head_dim, int members = 1);

// The parallel form's backward for (dtype, Dk): the query-side kernel (row terms, dQ) or the key-side one
// (dK, dV) of retention_parallel_*_backward_kernel.cuh with `members` (batch, value slice) pairs per CTA (1, or
// kDecayMatrixMembers for the matrix form), or null. Their Dv is a runtime multiple of 64.
const ChunkKernel* find_parallel_backward_kernel(DType dtype, int head_dim, bool key_side, int members = 1);

// Head dims and value blocks that have instances, for messages ("64, 128").
std::string chunk_head_dims_text();

// Registered by each instance file.
const ChunkKernel* chunk_kernels_f16(int* count);
const ChunkKernel* chunk_kernels_bf16(int* count);
const ChunkKernel* wgmma_chunk_kernels_f16(int* count);
const ChunkKernel* wgmma_chunk_kernels_bf16(int* count);
const ChunkKernel* wgmma_matrix_kernels_f16(int* count);
const ChunkKernel* wgmma_matrix_kernels_bf16(int* count);
const ChunkKernel* decode_kernels_f16(int* count);
const ChunkKernel* decode_kernels_bf16(int* count);
const ChunkKernel* normalized_kernels_f16(int* count);
const ChunkKernel* normalized_kernels_bf16(int* count);
const ChunkKernel* parallel_backward_kernels_f16(int* count);
const ChunkKernel* parallel_backward_kernels_bf16(int* count);

}  // namespace attnkit::cuda::retention
