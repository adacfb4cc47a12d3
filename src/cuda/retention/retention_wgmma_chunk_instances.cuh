// Defines the instances of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh) for one element
// type: Dk 64 and 128 with value block 64, Dk 128 with value block 128 (included once by each
// retention_wgmma_chunk_instances_<dtype>.cu). Compiled only where the build targets sm_90a (CMakeLists.txt defines
// ATTNKIT_RETENTION_WGMMA for these files then); elsewhere the tables are empty and the plans keep the mma.sync kernel.
#pragma once
#include "cuda/retention/retention_chunk_registry.hpp"

#if defined(ATTNKIT_RETENTION_WGMMA)
#include "cuda/common/programmatic_launch.cuh"
#include "cuda/retention/retention_wgmma_chunk_kernel.cuh"
#include "cuda/retention/retention_wgmma_chunk_traits.cuh"

namespace attnkit::cuda::retention {

// An outputs launch of segmented jobs comes right after their state-only launch (retention_plan.cpp) and reads its
// states only after wait_for_preceding_grid: it launches as a programmatic dependent of it. The caller checks the
// launch (cudaGetLastError).
template <class Traits>
void launch_wgmma_chunk_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  (void)launch_kernel(retention_wgmma_chunk_kernel<Traits>, dim3(static_cast<unsigned>(ctas)), dim3(Traits::kThreads),
                      Traits::kSharedBytes, stream, params.segments > 1 && params.state_only == 0, params);
}

template <class Traits>
void launch_wgmma_chunk_jobs(const ChunkJobs& jobs, int64_t ctas, cudaStream_t stream) {
  bool after_state_launch = false;
  for (int j = 0; j < jobs.count; ++j) {
    after_state_launch = after_state_launch || (jobs.jobs[j].segments > 1 && jobs.jobs[j].state_only == 0);
  }
  (void)launch_kernel(retention_wgmma_chunk_jobs_kernel<Traits>, dim3(static_cast<unsigned>(ctas)),
                      dim3(Traits::kThreads), Traits::kSharedBytes, stream, after_state_launch, jobs);
}

template <class Element, int HeadDim, int ValueBlock>
ChunkKernel wgmma_chunk_kernel_entry(DType dtype) {
  using Traits = WgmmaChunkTraits<Element, HeadDim, ValueBlock>;
  ChunkKernel kernel{"wgmma_chunk64",
                     dtype,
                     HeadDim,
                     Traits::kValueBlock,
                     Traits::kThreads,
                     Traits::kSharedBytes,
                     reinterpret_cast<const void*>(&retention_wgmma_chunk_kernel<Traits>),
                     &launch_wgmma_chunk_kernel<Traits>,
                     reinterpret_cast<const void*>(&retention_wgmma_chunk_jobs_kernel<Traits>),
                     &launch_wgmma_chunk_jobs<Traits>};
  kernel.resident = Traits::kMinBlocksPerSm;
  return kernel;
}

template <class Element>
const ChunkKernel* wgmma_chunk_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      wgmma_chunk_kernel_entry<Element, 64, 64>(dtype),
      wgmma_chunk_kernel_entry<Element, 128, 64>(dtype),
      wgmma_chunk_kernel_entry<Element, 128, 128>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

}  // namespace attnkit::cuda::retention

#else

namespace attnkit::cuda::retention {

template <class Element>
const ChunkKernel* wgmma_chunk_kernel_table(DType, int* count) {
  *count = 0;
  return nullptr;
}

}  // namespace attnkit::cuda::retention

#endif
