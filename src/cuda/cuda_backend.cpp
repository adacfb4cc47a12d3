// The CUDA backend's entry points in a build with CUDA: device queries and the fused-attention plans
// (element masks through cuda/mask_path, which picks the tile-list or the scattered path).
// Each op's plan checks the backend's capabilities and throws Status::unsupported naming what is allowed.
#include "cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/fmha/fmha_backward.hpp"
#include "cuda/fmha/fmha_forward.hpp"
#include "cuda/gemm/gemm_plan.hpp"
#include "cuda/mask_path/element_mask_plan.hpp"
#include "cuda/retention/retention_plan.hpp"

namespace attnkit::cuda {
namespace {

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
  if (problem.mask.kind == MaskKind::element) return mask_path::make_element_mask_forward_plan(problem, shape, options);
  return fmha::make_forward_plan(problem, shape, options);
}

detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward& problem,
                                                                 const detail::AttentionShape& shape,
                                                                 const RunOptions& options) {
  if (problem.mask.kind == MaskKind::element) {
    return mask_path::make_element_mask_backward_plan(problem, shape, options);
  }
  return fmha::make_backward_plan(problem, shape, options);
}

detail::MadePlan<RetentionForward> make_retention_forward_plan(const RetentionForward& problem,
                                                               const RunOptions& options) {
  return retention::make_forward_plan(problem, options);
}

detail::MadePlan<RetentionBackward> make_retention_backward_plan(const RetentionBackward& problem,
                                                                 const RunOptions& options) {
  return retention::make_backward_plan(problem, options);
}

detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem& problem, const RunOptions& options) {
  return gemm::make_gemm_plan(problem, options);
}

}  // namespace attnkit::cuda
