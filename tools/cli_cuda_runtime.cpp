// CUDA runtime calls of the CLI (see cli_cuda_runtime.hpp); compiled only in CUDA builds.
#ifdef ATTNKIT_WITH_CUDA
#include "cli_cuda_runtime.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cli::cuda_runtime {
namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  const Status kind = status == cudaErrorMemoryAllocation ? Status::out_of_memory : Status::cuda_error;
  throw Error(kind, std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace

void* allocate(int device, std::size_t bytes) {
  check(cudaSetDevice(device), "cudaSetDevice");
  void* pointer = nullptr;
  check(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  return pointer;
}

void release(int device, void* pointer) noexcept {
  if (pointer == nullptr) return;
  cudaSetDevice(device);
  cudaFree(pointer);
}

void copy_to_device(int device, void* destination, const void* source, std::size_t bytes) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaMemcpy(destination, source, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
}

void copy_to_host(int device, void* destination, const void* source, std::size_t bytes) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
}

void synchronize(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

double time_milliseconds(int device, const std::function<void()>& work) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  float milliseconds = 0.0f;
  try {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&milliseconds, start, stop), "cudaEventElapsedTime");
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return milliseconds;
}

}  // namespace attnkit::cli::cuda_runtime
#endif
