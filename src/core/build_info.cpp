#include "attnkit/build_info.hpp"

#include <sstream>
#include <string>

#include "attnkit/version.hpp"
#include "cuda/cuda_backend.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

#ifndef ATTNKIT_CUDA_ARCH_LIST
#define ATTNKIT_CUDA_ARCH_LIST ""
#endif

namespace attnkit {

const char* version_string() { return ATTNKIT_VERSION_STRING; }

BuildInfo build_info() {
  BuildInfo info;
  info.version = ATTNKIT_VERSION_STRING;
  info.cuda_compiled = cuda::compiled();
  std::istringstream archs(ATTNKIT_CUDA_ARCH_LIST);
  for (std::string arch; std::getline(archs, arch, ';');) {
    if (!arch.empty()) info.cuda_archs.push_back(arch);
  }
  info.cuda_runtime_version = cuda::runtime_version();
  info.cuda_driver_version = cuda::driver_version();
#if defined(_OPENMP)
  info.cpu_threads = omp_get_max_threads();
#else
  info.cpu_threads = 1;
#endif
  return info;
}

std::vector<DeviceInfo> cuda_devices() { return cuda::devices(); }

}  // namespace attnkit
