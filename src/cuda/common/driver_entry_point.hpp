// A CUDA driver function looked up through the runtime (its CUDA 12.0 version), so that the library links no
// libcuda and still loads, and runs on the CPU, on machines without a GPU driver.
#pragma once
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace attnkit::cuda {

// The driver's function `name` as a `Function` pointer, or nullptr when the driver lacks it or cannot be asked;
// callers keep the result and say what is missing.
template <class Function>
Function driver_entry_point(const char* name) {
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status = cudaGetDriverEntryPointByVersion(name, &pointer, 12000, cudaEnableDefault, &found);
  if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) return nullptr;
  return reinterpret_cast<Function>(pointer);
}

// The driver's cuTensorMapEncodeTiled, looked up once (nullptr without it), for every TMA descriptor the library
// encodes.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encode_tiled() {
  static const auto function = driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
  return function;
}

}  // namespace attnkit::cuda
