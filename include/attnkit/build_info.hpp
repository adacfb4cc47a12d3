// What this build of libattnkit contains and which devices it sees.
#pragma once
#include <string>
#include <vector>
#include "attnkit/export.hpp"

namespace attnkit {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability = 0;  // major*10 + minor
  int multiprocessors = 0;
  long long memory_bytes = 0;
};

struct BuildInfo {
  std::string version;
  bool cuda_compiled = false;
  std::vector<std::string> cuda_archs;  // e.g. {"80", "90a"}
  std::string cuda_runtime_version;     // "13.0" or "" without CUDA
  std::string cuda_driver_version;      // "" when no driver
  int cpu_threads = 0;
};

ATTNKIT_API BuildInfo build_info();
ATTNKIT_API std::vector<DeviceInfo> cuda_devices();  // empty when none or built without CUDA

}  // namespace attnkit
