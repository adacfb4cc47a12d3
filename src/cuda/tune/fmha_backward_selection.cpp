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

struct BackwardDirection {
  static constexpr tune::TuneOp op = tune::TuneOp::attention_backward;
  static constexpr const char* forced_variable = kForcedBackwardConfigVariable;
  static constexpr const char* name = "backward";
  static const FmhaBackwardKernel* registry_default(DType dtype, const detail::AttentionShape& shape, MaskKind mask,
                                                    const FmhaDevice& device) {
    return fmha_backward_default_kernel(dtype, shape.head_dim, shape.head_dim_v, fmha_backward_policy_for(mask),
                                        device);
  }
  static std::string config_name(const FmhaBackwardKernel& kernel) { return fmha_backward_config_name(kernel.config); }
  static const FmhaBackwardKernel* entry_of(const tune::Config& config) { return backward_kernel_of(config); }
  static bool fits(const FmhaBackwardKernel& kernel, const FmhaDevice& device) {
    return fmha_backward_config_fits(kernel.config, device);
  }
};

}  // namespace

BackwardSelection select_backward_kernel(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                         const RunOptions& options, int device, const FmhaDevice& limits) {
  return select_registry_kernel<BackwardDirection, FmhaBackwardKernel>(
      problem.q.dtype, shape, problem.mask.kind, limits, [&] {
        return choose_attention_config(BackwardDirection::op, problem.q.dtype, shape, problem.mask, options, device);
      });
}

BackwardSelection backward_selection(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                     const RunOptions& options) {
  check_backward_supported(problem, shape);
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  FmhaDevice limits = require_sm80_device(device);
  limits.portable_only = problem.mask.rpb.defined();  // the Hopper dK/dV kernel adds no positional bias
  const int max_shared = limits.max_shared_bytes_optin;
  BackwardSelection selection = select_backward_kernel(problem, shape, options, device, limits);
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
