#include "cuda/tune/fmha_backward_selection.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>

#include "attnkit/error.hpp"
#include "core/log.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit::cuda::fmha {
namespace {

BackwardSelection registry_default(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                   const FmhaDevice& device) {
  BackwardSelection selection;
  selection.kernel = fmha_backward_default_kernel(problem.q.dtype, shape.head_dim, shape.head_dim_v,
                                                  fmha_backward_policy_for(problem.mask.kind), device);
  if (selection.kernel != nullptr) selection.name = fmha_backward_config_name(selection.kernel->config);
  return selection;
}

}  // namespace

BackwardSelection select_backward_kernel(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                         const RunOptions& options, int device, const FmhaDevice& limits) {
  if (forced_config_name(kForcedBackwardConfigVariable) != nullptr) return registry_default(problem, shape, limits);
  try {
    const AttentionConfigChoice answer = choose_attention_config(tune::TuneOp::attention_backward, problem.q.dtype,
                                                                 shape, problem.mask, options, device);
    const tune::TuneChoice& choice = answer.choice;
    BackwardSelection selection;
    selection.kernel = backward_kernel_of(*choice.config);
    selection.name = choice.config->id;
    selection.source = choice.source;
    selection.provisional = answer.provisional;
    if (selection.kernel != nullptr && fmha_backward_config_fits(selection.kernel->config, limits)) return selection;
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CUDA backward config from the tuner (") +
                                                       e.what() + "); using the registry default");
  }
  return registry_default(problem, shape, limits);
}

BackwardSelection backward_selection(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                     const RunOptions& options) {
  check_backward_supported(problem, shape);
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  const FmhaDevice limits = require_sm80_device(device);
  const int max_shared = limits.max_shared_bytes_optin;
  BackwardSelection selection = select_backward_kernel(problem, shape, options, device, limits);
  selection.multiprocessors = limits.multiprocessors;
  if (selection.kernel == nullptr) {
    throw Error(Status::unsupported,
                "head_dim: no compiled backward kernel for " + std::string(dtype_name(problem.q.dtype)) +
                    " with max(D, Dv) = " + std::to_string(std::max(shape.head_dim, shape.head_dim_v)) +
                    " fits cuda:" + std::to_string(device) + " (" + std::to_string(max_shared) +
                    " bytes of shared memory per block); compiled: " + fmha_backward_compiled_summary());
  }
  return selection;
}

}  // namespace attnkit::cuda::fmha
