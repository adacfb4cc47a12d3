// Defines the instances of the parallel form's backward kernels (retention_parallel_query_backward_kernel.cuh,
// retention_parallel_key_backward_kernel.cuh) for one element type, by head dim Dk; Dv is a runtime multiple
// of 64 up to kParallelBackwardMaxValueDim, so each launch sizes its shared memory from it. Included
// once by each retention_parallel_backward_instances_<dtype>.cu.
#pragma once
#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_parallel_key_backward_kernel.cuh"
#include "cuda/retention/retention_parallel_query_backward_kernel.cuh"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, bool KeySide, int Members>
void launch_parallel_backward_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  using Traits = ParallelBackwardTraits<Element, HeadDim, Members>;
  const int element_bytes = static_cast<int>(sizeof(Element));
  const int shared_bytes =
      Members == 1
          ? Traits::shared_bytes(params.value_columns) + decay_tiles_shared_bytes(params.decay, element_bytes)
          : parallel_backward_grouped_shared_bytes(HeadDim, params.value_columns, element_bytes, params.decay.f32 != 0);
  if constexpr (KeySide) {
    retention_parallel_key_backward_kernel<Element, HeadDim, Members>
        <<<static_cast<unsigned>(ctas), Traits::kThreads, shared_bytes, stream>>>(params);
  } else {
    retention_parallel_query_backward_kernel<Element, HeadDim, Members>
        <<<static_cast<unsigned>(ctas), Traits::kThreads, shared_bytes, stream>>>(params);
  }
}

// The most shared memory a launch asks for: one member with Dv = kMaxValueDim and two float32 tile stages; grouped,
// the largest that SM90 allows (the selection takes the grouped instances only where a launch fits it).
template <class Element, int HeadDim, bool KeySide, int Members>
ChunkKernel parallel_backward_kernel_entry(DType dtype) {
  using Traits = ParallelBackwardTraits<Element, HeadDim, Members>;
  const void* function =
      KeySide ? reinterpret_cast<const void*>(&retention_parallel_key_backward_kernel<Element, HeadDim, Members>)
              : reinterpret_cast<const void*>(&retention_parallel_query_backward_kernel<Element, HeadDim, Members>);
  const int one_member_bytes = Traits::member_shared_bytes(Traits::kMaxValueDim) + kDecayTilesMaxSharedBytes;
  ChunkKernel kernel{Members == 1 ? (KeySide ? "parallel_bwd_key" : "parallel_bwd_query")
                                  : (KeySide ? "parallel_bwd_key_grouped" : "parallel_bwd_query_grouped"),
                     dtype,
                     HeadDim,
                     64,
                     Traits::kThreads,
                     Members == 1 ? one_member_bytes : kMaxSharedBytesPerBlock,
                     function,
                     &launch_parallel_backward_kernel<Element, HeadDim, KeySide, Members>};
  kernel.members = Members;
  return kernel;
}

// One member per CTA (the gamma form, and the matrix form where the grouped CTA's shared memory does not fit), and
// kDecayMatrixMembers (the matrix form).
template <class Element>
const ChunkKernel* parallel_backward_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      parallel_backward_kernel_entry<Element, 64, false, 1>(dtype),
      parallel_backward_kernel_entry<Element, 64, true, 1>(dtype),
      parallel_backward_kernel_entry<Element, 128, false, 1>(dtype),
      parallel_backward_kernel_entry<Element, 128, true, 1>(dtype),
      parallel_backward_kernel_entry<Element, 64, false, kDecayMatrixMembers>(dtype),
      parallel_backward_kernel_entry<Element, 64, true, kDecayMatrixMembers>(dtype),
      parallel_backward_kernel_entry<Element, 128, false, kDecayMatrixMembers>(dtype),
      parallel_backward_kernel_entry<Element, 128, true, kDecayMatrixMembers>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

}  // namespace attnkit::cuda::retention
