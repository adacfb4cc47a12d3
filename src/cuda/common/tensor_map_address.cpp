#include "cuda/common/tensor_map_address.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda {
namespace {

// Looked up through the runtime, as the other driver entry points: the library does not link libcuda itself,
// so it still loads (and runs on the CPU) on machines without a GPU driver.
PFN_cuTensorMapReplaceAddress_v12000 replace_function() {
  static const PFN_cuTensorMapReplaceAddress_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapReplaceAddress", &pointer, 12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) pointer = nullptr;
    return reinterpret_cast<PFN_cuTensorMapReplaceAddress_v12000>(pointer);
  }();
  if (function == nullptr) {
    throw Error(Status::cuda_error,
                "cuTensorMapReplaceAddress: not found in the CUDA driver (needs a CUDA 12+ driver)");
  }
  return function;
}

}  // namespace

void replace_tensor_map_address(void* descriptor, const void* address, const char* what) {
  const CUresult result = replace_function()(static_cast<CUtensorMap*>(descriptor), const_cast<void*>(address));
  if (result != CUDA_SUCCESS) {
    throw Error(Status::cuda_error, std::string("cuTensorMapReplaceAddress (") + what + "): CUresult " +
                                        std::to_string(static_cast<int>(result)));
  }
}

}  // namespace attnkit::cuda
