// Defines the instances of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh) for one element type: Dk
// 64 with value block 64, Dk 128 with value blocks 64 and 128 (included once by each
// retention_wgmma_matrix_instances_<dtype>.cu). Compiled only where the build targets sm_90a (CMakeLists.txt defines
// ATTNKIT_RETENTION_WGMMA for these files then); elsewhere the tables are empty and the plans keep the mma.sync kernel.
#pragma once
#include "cuda/retention/retention_chunk_registry.hpp"

#if defined(ATTNKIT_RETENTION_WGMMA)
#include <cuda.h>
#include <cutlass/numeric_types.h>

#include <string>
#include <type_traits>

#include "attnkit/error.hpp"
#include "cuda/common/driver_entry_point.hpp"
#include "cuda/retention/retention_decay_map_kernel.cuh"
#include "cuda/retention/retention_wgmma_matrix_kernel.cuh"
#include "cuda/retention/retention_wgmma_matrix_traits.cuh"

namespace attnkit::cuda::retention {

// The TMA descriptor of the matrix [H|1, Tq, Tk] (params.decay): boxes of 128 bytes of a row (32 float32 or 64 16-bit
// entries) by a cluster CTA's share of a tile's 128 rows, the 128-byte swizzle, zeros past the edges.
inline CUtensorMap matrix_tile_map(const ChunkParams& params, DType dtype) {
  const DecayMatrixOperand& d = params.decay;
  const int64_t entry = d.f32 != 0 ? 4 : 2;
  const int64_t matrices = decay_matrices(params);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(params.tokens_k), static_cast<cuuint64_t>(params.tokens),
                              static_cast<cuuint64_t>(matrices)};
  const cuuint64_t strides[2] = {
      static_cast<cuuint64_t>(d.row * entry),
      static_cast<cuuint64_t>(matrices > 1 ? d.head * entry : params.tokens * d.row * entry)};
  // Each CTA of a cluster loads 128 / cluster rows of a tile.
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / entry), static_cast<cuuint32_t>(128 / d.cluster), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = d.f32 != 0             ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap map{};
  const auto encode = tensor_map_encode_tiled();
  const CUresult result = encode == nullptr
                              ? CUDA_ERROR_NOT_SUPPORTED
                              : encode(&map, type, 3, const_cast<void*>(d.data), dims, strides, box, element_strides,
                                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(Status::cuda_error,
                "cuTensorMapEncodeTiled (retention decay matrix): CUresult " +
                    std::to_string(static_cast<int>(result)) +
                    (encode == nullptr ? " (not found in the CUDA driver: needs a CUDA 12+ driver)" : ""));
  }
  return map;
}

// The tile map (params.decay.tile_map, in the call's workspace), then the kernel in clusters. The caller checks the
// launches (cudaGetLastError).
template <class Traits>
void launch_wgmma_matrix_kernel(const ChunkParams& params, int64_t ctas, cudaStream_t stream) {
  const CUtensorMap matrix =
      matrix_tile_map(params, std::is_same_v<typename Traits::Element, cutlass::bfloat16_t> ? DType::bf16 : DType::f16);
  const dim3 map_grid(static_cast<unsigned>(decay_map_row_bytes(params.tokens_k)),
                      static_cast<unsigned>((params.tokens + 127) / 128),
                      static_cast<unsigned>(decay_matrices(params)));
  retention_decay_map_kernel<<<map_grid, kDecayMapThreads, 0, stream>>>(params);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(Traits::kThreads);
  config.dynamicSmemBytes = Traits::kSharedBytes;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(params.decay.cluster);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  (void)cudaLaunchKernelEx(&config, retention_wgmma_matrix_kernel<Traits>, params, matrix);
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
