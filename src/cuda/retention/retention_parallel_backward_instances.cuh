// Defines the instances of the parallel form's backward kernels (retention_parallel_query_backward_kernel.cuh,
// retention_parallel_key_backward_kernel.cuh) for one element type, by head dim Dk; Dv is a runtime multiple
// of 64 up to kParallelBackwardMaxValueDim, so each launch sizes its shared memory from it. Included
// once by each retention_parallel_backward_instances_<dtype>.cu.
#pragma once
#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_parallel_key_backward_kernel.cuh"
#include "cuda/retention/retention_parallel_query_backward_kernel.cuh"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, bool KeySide>
void launch_parallel_backward_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  using Traits = ParallelBackwardTraits<Element, HeadDim>;
  const int shared_bytes = Traits::shared_bytes(params.value_columns) +
                           decay_tiles_shared_bytes(params.decay, static_cast<int>(sizeof(Element)));
  if constexpr (KeySide) {
    retention_parallel_key_backward_kernel<Element, HeadDim>
        <<<static_cast<unsigned>(ctas), Traits::kThreads, shared_bytes, stream>>>(params);
  } else {
    retention_parallel_query_backward_kernel<Element, HeadDim>
        <<<static_cast<unsigned>(ctas), Traits::kThreads, shared_bytes, stream>>>(params);
  }
}

template <class Element, int HeadDim, bool KeySide>
ChunkKernel parallel_backward_kernel_entry(DType dtype) {
  using Traits = ParallelBackwardTraits<Element, HeadDim>;
  const void* function =
      KeySide ? reinterpret_cast<const void*>(&retention_parallel_key_backward_kernel<Element, HeadDim>)
              : reinterpret_cast<const void*>(&retention_parallel_query_backward_kernel<Element, HeadDim>);
  return ChunkKernel{
      KeySide ? "parallel_bwd_key" : "parallel_bwd_query",
      dtype,
      HeadDim,
      64,
      Traits::kThreads,
      Traits::shared_bytes(Traits::kMaxValueDim) + kDecayTilesMaxSharedBytes,  // the most a launch asks for
      function,
      &launch_parallel_backward_kernel<Element, HeadDim, KeySide>};
}

template <class Element>
const ChunkKernel* parallel_backward_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      parallel_backward_kernel_entry<Element, 64, false>(dtype),
      parallel_backward_kernel_entry<Element, 64, true>(dtype),
      parallel_backward_kernel_entry<Element, 128, false>(dtype),
      parallel_backward_kernel_entry<Element, 128, true>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

}  // namespace attnkit::cuda::retention
