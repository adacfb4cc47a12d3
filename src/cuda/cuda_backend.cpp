// The CUDA backend's entry points in a build with CUDA: device queries and the fused-attention plans.
// Operations whose CUDA kernels do not exist yet throw Status::unsupported pointing to the CPU backend.
#include "cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/fmha/fmha_backward.hpp"
#include "cuda/fmha/fmha_forward.hpp"

namespace attnkit::cuda {
namespace {

[[noreturn]] void not_yet(const char* what) {
  throw Error(Status::unsupported,
              std::string(what) + ": not yet available on the CUDA backend; allowed: run on CPU tensors (backend cpu)");
}

std::string version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

}  // namespace

bool compiled() { return true; }

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> list;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: report none, leave no sticky error behind
    return list;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    DeviceInfo info;
    info.index = i;
    info.name = props.name;
    info.compute_capability = props.major * 10 + props.minor;
    info.multiprocessors = props.multiProcessorCount;
    info.memory_bytes = static_cast<long long>(props.totalGlobalMem);
    list.push_back(info);
  }
  return list;
}

std::string runtime_version() {
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess || version == 0) return "";
  return version_string(version);
}

std::string driver_version() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess || version == 0) {
    cudaGetLastError();
    return "";
  }
  return version_string(version);
}

detail::MadePlan<AttentionForward> make_attention_forward_plan(const AttentionForward& problem,
                                                               const detail::AttentionShape& shape,
                                                               const RunOptions& options) {
  return fmha::make_forward_plan(problem, shape, options);
}

detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward& problem,
                                                                 const detail::AttentionShape& shape,
                                                                 const RunOptions& options) {
  return fmha::make_backward_plan(problem, shape, options);
}

void retention_forward(const RetentionForward&, const RunOptions&) { not_yet("retention_forward"); }

void retention_backward(const RetentionBackward&, const RunOptions&) { not_yet("retention_backward"); }

void gemm(const GemmProblem&, const RunOptions&) { not_yet("gemm"); }

}  // namespace attnkit::cuda
