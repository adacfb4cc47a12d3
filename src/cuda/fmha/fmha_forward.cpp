#include "cuda/fmha/fmha_forward.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"

namespace attnkit::cuda::fmha {
namespace {

const FmhaKernel& forward_kernel(const AttentionForward& problem, const detail::AttentionShape& shape,
                                 const RunOptions& options) {
  return *forward_selection(problem, shape, options).kernel;
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
