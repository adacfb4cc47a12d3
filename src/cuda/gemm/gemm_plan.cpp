#include "cuda/gemm/gemm_plan.hpp"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "core/tuned_config.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_registry.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "cuda/gemm/gemm_staging.hpp"
#include "cuda/tune/gemm_selection.hpp"

namespace attnkit::cuda::gemm {
namespace {

// The device whose primary context this thread last made current here with cudaSetDevice (-1: none yet).
thread_local int primary_context_device = -1;

// Makes `device` current for a run or a plan's making and restores the caller's device after, when it differed.
// The runtime calls of a run make the device's primary context current by themselves, but its driver calls
// (cuTensorMapEncodeTiled and cuTensorMapReplaceAddress, for the Hopper kernels' TMA descriptors) need it current
// already, and a thread that never used the runtime (PyTorch's autograd device thread, a fresh std::thread) has
// none: cudaSetDevice makes it current (and is allowed during stream capture). It is called once per thread and
// device: while the device stays current, the context this thread made current stays too (cudaSetDevice, here or
// elsewhere, makes a primary context current), so the common run, its device current on a thread that ran here
// before, costs one cudaGetDevice. A caller that makes another context of the device current with the driver API
// (cuCtxSetCurrent) keeps it for the run: the descriptors are encoded there.
class RunDevice {
 public:
  explicit RunDevice(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ == device && primary_context_device == device) return;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    primary_context_device = device;
    restore_ = previous_ != device;
  }
  ~RunDevice() {
    if (restore_ && cudaSetDevice(previous_) == cudaSuccess) primary_context_device = previous_;
  }
  RunDevice(const RunDevice&) = delete;
  RunDevice& operator=(const RunDevice&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

class CudaGemmPlan final : public detail::OpPlan<GemmProblem> {
 public:
  CudaGemmPlan(TunedConfig choice, std::unique_ptr<GemmRunner> runner, GemmShape shape, int device)
      : choice_(std::move(choice)), runner_(std::move(runner)), shape_(shape), device_(device) {}

  int64_t workspace_bytes() const override { return runner_->workspace_bytes(); }

  void run(const GemmProblem& problem, const RunOptions& options) const override {
    const RunDevice device(device_);
    const GemmShape shape = bind_gemm(shape_, problem);
    const auto stream = static_cast<cudaStream_t>(options.stream);
    const int64_t needed = runner_->workspace_bytes();
    const auto alpha = static_cast<float>(problem.alpha), beta = static_cast<float>(problem.beta);
    if (needed == 0 || (options.workspace != nullptr && options.workspace_bytes >= needed)) {
      runner_->run(shape, alpha, beta, options.workspace, stream);
      return;
    }
    // No caller workspace: stream-ordered scratch, freed behind the kernel on the same stream.
    void* memory = nullptr;
    check_cuda(cudaMallocAsync(&memory, static_cast<size_t>(needed), stream), "cudaMallocAsync (gemm workspace)");
    try {
      runner_->run(shape, alpha, beta, memory, stream);
    } catch (...) {
      cudaFreeAsync(memory, stream);
      throw;
    }
    check_cuda(cudaFreeAsync(memory, stream), "cudaFreeAsync (gemm workspace)");
  }

  TunedConfig config() const override { return choice_; }

 private:
  TunedConfig choice_;
  std::unique_ptr<GemmRunner> runner_;
  GemmShape shape_;
  int device_ = 0;
};

}  // namespace

detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem& problem, const RunOptions& options) {
  const int index = problem.a.device.index;
  const RunDevice run_device(index);
  const GemmDevice& device = gemm_device(index);
  const GemmShape shape = describe_gemm(problem);
  const GemmSelection selection = select_gemm_config(shape, problem.allow_tf32, options, index);
  const GemmChoice& choice = selection.choice;
  std::unique_ptr<GemmRunner> runner =
      choice.kernel->make_runner(choice.staging.any() ? staged_shape(shape, choice.staging) : shape, device);
  runner = make_staged_runner(shape, choice.staging, std::move(runner), device);
  detail::MadePlan<GemmProblem> made;
  made.plan = std::make_unique<CudaGemmPlan>(detail::tuned_config(choice.name(), selection.source), std::move(runner),
                                             shape, index);
  made.reusable = !selection.provisional;
  return made;
}

}  // namespace attnkit::cuda::gemm
