#include "cuda/fmha/fmha_forward.hpp"

#include <memory>

#include "core/tuned_config.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_plan.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"

namespace attnkit::cuda::fmha {

using FmhaForwardPlan = KernelPlan<AttentionForward, FmhaKernel, FmhaLaunch, FmhaWorkspace, &rebind_forward_launch>;

detail::MadePlan<AttentionForward> make_forward_plan(const AttentionForward& problem,
                                                     const detail::AttentionShape& shape, const RunOptions& options,
                                                     ForwardTileShape* tile_shape) {
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  const ForwardSelection selection = forward_selection(problem, shape, options);
  const FmhaKernel& kernel = *selection.kernel;
  if (tile_shape != nullptr) *tile_shape = ForwardTileShape{kernel.config.block_m, kernel.config.block_n};
  detail::MadePlan<AttentionForward> made;
  FmhaLaunch launch = make_forward_launch(problem, shape, kernel.config);
  launch.multiprocessors = fmha_device(device).multiprocessors;
  made.plan =
      std::make_unique<FmhaForwardPlan>(kernel, launch, device, detail::tuned_config(selection.name, selection.source));
  made.reusable = !selection.provisional;
  return made;
}

}  // namespace attnkit::cuda::fmha
