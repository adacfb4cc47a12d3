// Defines the instances of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh) for one element type: Dk
// 64 with value block 64, Dk 128 with value blocks 64 and 128 (included once by each
// retention_wgmma_matrix_instances_<dtype>.cu). Compiled only where the build targets sm_90a (CMakeLists.txt defines
// ATTNKIT_RETENTION_WGMMA for these files then); elsewhere the tables are empty and the plans keep the mma.sync kernel.
#pragma once
#include "cuda/retention/retention_chunk_registry.hpp"

#if defined(ATTNKIT_RETENTION_WGMMA)
#include "cuda/retention/retention_decay_map_kernel.cuh"
#include "cuda/retention/retention_wgmma_matrix_kernel.cuh"
#include "cuda/retention/retention_wgmma_matrix_traits.cuh"

namespace attnkit::cuda::retention {

// The tile map (params.decay.tile_map, in the call's workspace), then the kernel. The caller checks the launch
// (cudaGetLastError).
template <class Traits>
void launch_wgmma_matrix_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  const dim3 map_grid(static_cast<unsigned>(decay_map_row_bytes(params.tokens_k)),
                      static_cast<unsigned>((params.tokens + 127) / 128),
                      static_cast<unsigned>(params.decay.head != 0 ? params.heads : 1));
  retention_decay_map_kernel<<<map_grid, kDecayMapThreads, 0, stream>>>(params);
  retention_wgmma_matrix_kernel<Traits>
      <<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
}

template <class Element, int HeadDim, int ValueBlock>
ChunkKernel wgmma_matrix_kernel_entry(DType dtype) {
  using Traits = WgmmaMatrixTraits<Element, HeadDim, ValueBlock>;
  ChunkKernel kernel{kWgmmaMatrixFamily,
                     dtype,
                     HeadDim,
                     ValueBlock,
                     Traits::kThreads,
                     Traits::kSharedBytes,
                     reinterpret_cast<const void*>(&retention_wgmma_matrix_kernel<Traits>),
                     &launch_wgmma_matrix_kernel<Traits>};
  kernel.resident = 1;
  return kernel;
}

template <class Element>
const ChunkKernel* wgmma_matrix_kernel_table(DType dtype, int* count) {
  static const ChunkKernel table[] = {
      wgmma_matrix_kernel_entry<Element, 64, 64>(dtype),
      wgmma_matrix_kernel_entry<Element, 128, 64>(dtype),
      wgmma_matrix_kernel_entry<Element, 128, 128>(dtype),
  };
  *count = static_cast<int>(sizeof(table) / sizeof(table[0]));
  return table;
}

}  // namespace attnkit::cuda::retention

#else

namespace attnkit::cuda::retention {

template <class Element>
const ChunkKernel* wgmma_matrix_kernel_table(DType, int* count) {
  *count = 0;
  return nullptr;
}

}  // namespace attnkit::cuda::retention

#endif
