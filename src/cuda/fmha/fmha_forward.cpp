#include "cuda/fmha/fmha_forward.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"

namespace attnkit::cuda::fmha {
namespace {

struct DeviceLimits {
  int compute_capability = 0;
  int max_shared_bytes_optin = 0;
};

DeviceLimits device_limits(int device) {
  DeviceLimits limits;
  int major = 0;
  int minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&limits.max_shared_bytes_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute");
  limits.compute_capability = major * 10 + minor;
  return limits;
}

// The kernel a forward call runs with: checks the device and picks the config (the tuner's choice).
const FmhaKernel& forward_kernel(const AttentionForward& problem, const detail::AttentionShape& shape,
                                 const RunOptions& options) {
  check_forward_supported(problem, shape);
  const int device = problem.q.device.index;
  const DeviceLimits limits = device_limits(device);
  if (limits.compute_capability < 80) {
    throw Error(Status::unsupported, "q.device: cuda:" + std::to_string(device) + " has compute capability " +
                                         std::to_string(limits.compute_capability / 10) + "." +
                                         std::to_string(limits.compute_capability % 10) +
                                         "; allowed: 8.0 or newer (the CUDA attention kernels use SM80 tensor cores "
                                         "and cp.async), or run on CPU tensors");
  }
  const FmhaPolicyKind policy = fmha_policy_for(problem.mask.kind);
  const FmhaKernel* kernel =
      select_forward_kernel(problem, shape, options, device, limits.max_shared_bytes_optin).kernel;
  if (kernel == nullptr) {
    throw Error(Status::unsupported,
                "head_dim: no compiled " + std::string(fmha_policy_name(policy)) + " kernel for " +
                    std::string(dtype_name(problem.q.dtype)) +
                    " with max(D, Dv) = " + std::to_string(std::max(shape.head_dim, shape.head_dim_v)) +
                    " fits cuda:" + std::to_string(device) + " (" + std::to_string(limits.max_shared_bytes_optin) +
                    " bytes of shared memory per block); compiled: " + fmha_compiled_summary());
  }
  return *kernel;
}

}  // namespace

void run_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options) {
  const DeviceGuard guard(problem.q.device.index);
  const FmhaKernel& kernel = forward_kernel(problem, shape, options);
  const FmhaLaunch launch = make_forward_launch(problem, shape, kernel.config);
  kernel.launch(launch, FmhaWorkspace{options.workspace, options.workspace_bytes},
                static_cast<cudaStream_t>(options.stream));
}

int64_t forward_workspace_size(const AttentionForward& problem, const detail::AttentionShape& shape,
                               const RunOptions& options) {
  const DeviceGuard guard(problem.q.device.index);
  const FmhaKernel& kernel = forward_kernel(problem, shape, options);
  return kernel.workspace_bytes(make_forward_launch(problem, shape, kernel.config));
}

}  // namespace attnkit::cuda::fmha
