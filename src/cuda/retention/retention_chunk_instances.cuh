// Defines the instances of the chunkwise retention kernel for one element type (included once by each
// retention_chunk_instances_<dtype>.cu, so the two element types compile in parallel).
#pragma once
#include "cuda/retention/retention_chunk_kernel.cuh"
#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_decode_kernel.cuh"
#include "cuda/retention/retention_normalized_kernel.cuh"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int ValueBlock>
void launch_chunk_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  using Traits = ChunkTraits<Element, HeadDim, ValueBlock>;
  retention_chunk_kernel<Element, HeadDim, ValueBlock>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
}

template <class Element, int HeadDim, int ValueBlock>
void launch_chunk_jobs(const ChunkJobs& jobs, int64_t ctas, cudaStream_t stream) {
  using Traits = ChunkTraits<Element, HeadDim, ValueBlock>;
  retention_chunk_jobs_kernel<Element, HeadDim, ValueBlock>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(jobs);
}

template <class Element, int HeadDim, int ValueBlock>
ChunkKernel chunk_kernel_entry(DType dtype) {
  using Traits = ChunkTraits<Element, HeadDim, ValueBlock>;
  return ChunkKernel{"chunk64",
                     dtype,
                     HeadDim,
                     ValueBlock,
                     Traits::kThreads,
                     Traits::kSharedBytes,
                     reinterpret_cast<const void*>(&retention_chunk_kernel<Element, HeadDim, ValueBlock>),
                     &launch_chunk_kernel<Element, HeadDim, ValueBlock>,
                     reinterpret_cast<const void*>(&retention_chunk_jobs_kernel<Element, HeadDim, ValueBlock>),
                     &launch_chunk_jobs<Element, HeadDim, ValueBlock>};
}

template <class Element>
const ChunkKernel* chunk_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      chunk_kernel_entry<Element, 64, 32>(dtype),
      chunk_kernel_entry<Element, 64, 64>(dtype),
      chunk_kernel_entry<Element, 128, 32>(dtype),
      chunk_kernel_entry<Element, 128, 64>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

template <class Element, int HeadDim>
void launch_decode_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  using Traits = DecodeTraits<Element, HeadDim>;
  retention_decode_kernel<Element, HeadDim>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
}

template <class Element, int HeadDim>
ChunkKernel decode_kernel_entry(DType dtype) {
  using Traits = DecodeTraits<Element, HeadDim>;
  return ChunkKernel{"decode",
                     dtype,
                     HeadDim,
                     Traits::kValueBlock,
                     Traits::kThreads,
                     Traits::kSharedBytes,
                     reinterpret_cast<const void*>(&retention_decode_kernel<Element, HeadDim>),
                     &launch_decode_kernel<Element, HeadDim>};
}

template <class Element>
const ChunkKernel* decode_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      decode_kernel_entry<Element, 64>(dtype),
      decode_kernel_entry<Element, 128>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

template <class Element, int HeadDim, int Members>
void launch_normalized_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  using Traits = NormalizedTraits<Element, HeadDim, Members>;
  const int shared_bytes =
      Traits::kSharedBytes + decay_tiles_shared_bytes(params.decay, static_cast<int>(sizeof(Element)));
  retention_normalized_kernel<Element, HeadDim, Members>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, shared_bytes, stream>>>(params);
}

template <class Element, int HeadDim, int Members>
ChunkKernel normalized_kernel_entry(DType dtype) {
  using Traits = NormalizedTraits<Element, HeadDim, Members>;
  ChunkKernel kernel{Members == 1 ? "normalized" : "normalized_grouped",
                     dtype,
                     HeadDim,
                     Traits::kValueBlock,
                     Traits::kThreads,
                     Traits::kSharedBytes + kDecayTilesMaxSharedBytes,  // the most a launch asks for
                     reinterpret_cast<const void*>(&retention_normalized_kernel<Element, HeadDim, Members>),
                     &launch_normalized_kernel<Element, HeadDim, Members>};
  kernel.members = Members;
  return kernel;
}

// One member per CTA (the gamma form, and the matrix form where the grouped CTA's shared memory does not fit), and
// kDecayMatrixMembers (the matrix form).
template <class Element>
const ChunkKernel* normalized_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      normalized_kernel_entry<Element, 64, 1>(dtype),
      normalized_kernel_entry<Element, 128, 1>(dtype),
      normalized_kernel_entry<Element, 64, kDecayMatrixMembers>(dtype),
      normalized_kernel_entry<Element, 128, kDecayMatrixMembers>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

}  // namespace attnkit::cuda::retention
