// Turns CUDA runtime failures into attnkit::Error(Status::cuda_error) naming the call that failed and
// the runtime's own description, so nothing returns silently after a failed call or launch.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what) {
  const Status kind = status == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::cuda_error;
  throw Error(kind, std::string(what) + ": CUDA error " + std::to_string(static_cast<int>(status)) + " (" +
                        cudaGetErrorName(status) + "): " + cudaGetErrorString(status));
}

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw_cuda_error(status, what);
}

// After a kernel launch: the launch itself (bad configuration, too much shared memory, ...).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// Makes `device` current for the lifetime of the guard and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int current = previous_;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace attnkit::cuda
