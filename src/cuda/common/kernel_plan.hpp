// The CUDA backends' plan (core/op_plan.hpp) of one kernel-registry entry: made once per call shape
// with the entry, the launch params built for that shape (Arguments -> Params) and the workspace they
// need; a run copies the params, points them at the call's tensors (Rebind) and launches the entry on the
// caller's stream with the caller's workspace. Every CUDA op (attention forward and backward today) is
// run through it, so a run does no validation, selection, device query or attribute setting of its own.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "attnkit/tuner.hpp"
#include "core/op_plan.hpp"
#include "cuda/common/cuda_check.hpp"

namespace attnkit::cuda {

// Kernel: a registry entry with launch(const Launch&, Workspace, cudaStream_t) and workspace_bytes(const
// Launch&); Workspace: {void* data; int64_t bytes;}; Rebind: points a Launch at a problem's tensors.
template <class Problem, class Kernel, class Launch, class Workspace, void (*Rebind)(Launch&, const Problem&)>
class KernelPlan final : public detail::OpPlan<Problem> {
 public:
  KernelPlan(const Kernel& kernel, Launch launch, int device, TunedConfig choice)
      : kernel_(kernel),
        launch_(std::move(launch)),
        workspace_bytes_(kernel.workspace_bytes(launch_)),
        device_(device),
        choice_(std::move(choice)) {}

  int64_t workspace_bytes() const override { return workspace_bytes_; }

  void run(const Problem& problem, const RunOptions& options) const override {
    const DeviceGuard guard(device_);
    Launch launch = launch_;
    Rebind(launch, problem);
    kernel_.launch(launch, Workspace{options.workspace, options.workspace_bytes},
                   static_cast<cudaStream_t>(options.stream));
  }

  TunedConfig config() const override { return choice_; }

 private:
  const Kernel& kernel_;
  Launch launch_;
  int64_t workspace_bytes_ = 0;
  int device_ = 0;
  TunedConfig choice_;
};

}  // namespace attnkit::cuda
