#include "cuda/tune/gemm_selection.hpp"

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "core/log.hpp"
#include "cuda/tune/cuda_config_choice.hpp"
#include "cuda/tune/gemm_config_space.hpp"
#include "cuda/tune/gemm_tuning_runner.hpp"
#include "cuda/tune/gpu_run_timer.hpp"

namespace attnkit::cuda::gemm {
namespace {

bool forced() {
  const char* name = std::getenv(kForcedGemmConfigVariable);
  return name != nullptr && name[0] != '\0';
}

}  // namespace

GemmSelection select_gemm_config(const GemmShape& shape, bool allow_tf32, const RunOptions& options, int device) {
  const GemmDevice& limits = gemm_device(device);
  GemmSelection selection;
  if (forced() || shape.product_zero) {
    selection.choice = select_gemm_kernel(shape, limits, allow_tf32);
    return selection;
  }
  try {
    const tune::ProblemSpec exact = gemm_spec_of(shape, allow_tf32);
    const CudaConfigChoice answer =
        choose_cuda_config(exact, options, device, [&exact, device]() -> std::unique_ptr<tune::Runner> {
          return std::make_unique<GemmTuningRunner>(exact, device, device_l2_bytes(device));
        });
    selection.source = answer.choice.source;
    selection.provisional = answer.provisional;
    const GemmKernel* kernel = gemm_kernel_of(*answer.choice.config);
    if (!answer.is_default && kernel != nullptr) {
      GemmStaging staging;
      const std::string why = gemm_config_refusal(*kernel, shape, limits, allow_tf32, &staging);
      if (why.empty()) {
        selection.choice = GemmChoice{kernel, staging};
        return selection;
      }
      detail::log_message(detail::LogLevel::info, "tuner: gemm winner " + answer.choice.config->id +
                                                      " cannot take this call's operands (" + why +
                                                      "); using the registry's choice");
      selection.source = tune::ChoiceSource::default_config;
    }
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CUDA gemm config from the tuner (") +
                                                       e.what() + "); using the registry's choice");
    selection.source = tune::ChoiceSource::default_config;
    selection.provisional = false;
  }
  selection.choice = select_gemm_kernel(shape, limits, allow_tf32);
  return selection;
}

}  // namespace attnkit::cuda::gemm
