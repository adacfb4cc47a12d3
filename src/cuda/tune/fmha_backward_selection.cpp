#include "cuda/tune/fmha_backward_selection.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>

#include "attnkit/error.hpp"
#include "core/log.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#include "tune/lazy_runner.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit::cuda::fmha {
namespace {

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, what, device), "cudaDeviceGetAttribute");
  return value;
}

BackwardSelection registry_default(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                   int max_shared_bytes_optin) {
  BackwardSelection selection;
  selection.kernel = fmha_backward_default_kernel(problem.q.dtype, shape.head_dim, shape.head_dim_v,
                                                  fmha_backward_policy_for(problem.mask.kind), max_shared_bytes_optin);
  if (selection.kernel != nullptr) selection.name = fmha_backward_config_name(selection.kernel->config);
  return selection;
}

}  // namespace

BackwardSelection select_backward_kernel(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                         const RunOptions& options, int device, int max_shared_bytes_optin) {
  try {
    const tune::ProblemKey key = tune::make_problem_key(
        tune::attention_problem_spec(tune::TuneOp::attention_backward, problem.q.dtype, shape, problem.mask, 1.0));
    const auto tuner = tune::cuda_process_tuner(device, [device] { return describe_cuda_device(device); });
    void* const stream = options.stream;
    tune::LazyRunner runner([&key, device, stream] {
      check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize (before tuning)");
      return std::make_unique<FmhaAttentionRunner>(key.spec, device, device_l2_bytes(device));
    });
    const tune::TuneChoice choice = tuner->choose(key, &runner, stream_is_capturing(stream));
    BackwardSelection selection;
    selection.kernel = fmha_backward_kernel_by_name(choice.config->id);
    selection.name = choice.config->id;
    selection.source = choice.source;
    if (selection.kernel != nullptr && std::max(selection.kernel->config.smem_bytes_dkdv,
                                                selection.kernel->config.smem_bytes_dq) <= max_shared_bytes_optin) {
      return selection;
    }
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CUDA backward config from the tuner (") +
                                                       e.what() + "); using the registry default");
  }
  return registry_default(problem, shape, max_shared_bytes_optin);
}

BackwardSelection backward_selection(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                     const RunOptions& options) {
  check_backward_supported(problem, shape);
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  if (attribute(cudaDevAttrComputeCapabilityMajor, device) < 8) {
    throw Error(Status::unsupported, "q.device: cuda:" + std::to_string(device) +
                                         " has compute capability below 8.0; allowed: 8.0 or newer, or CPU tensors");
  }
  BackwardSelection selection = select_backward_kernel(problem, shape, options, device,
                                                       attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (selection.kernel == nullptr) {
    throw Error(Status::unsupported, "head_dim: no compiled backward kernel for this call fits cuda:" +
                                         std::to_string(device) + "; compiled: " + fmha_backward_compiled_summary());
  }
  return selection;
}

}  // namespace attnkit::cuda::fmha
