#include "cuda/common/tensor_map_address.hpp"

#include <cudaTypedefs.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/driver_entry_point.hpp"

namespace attnkit::cuda {
namespace {

PFN_cuTensorMapReplaceAddress_v12000 replace_function() {
  static const auto function = driver_entry_point<PFN_cuTensorMapReplaceAddress_v12000>("cuTensorMapReplaceAddress");
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
