#include "cuda/tune/cuda_config_choice.hpp"

#include <cuda_runtime_api.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#include "tune/lazy_runner.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit::cuda {

CudaConfigChoice choose_cuda_config(const tune::ProblemSpec& exact, const RunOptions& options, int device,
                                    const TuningRunnerMaker& make_runner) {
  const tune::ProblemKey key = tune::make_problem_key(exact);
  const auto tuner = tune::cuda_process_tuner(device, [device] { return fmha::describe_cuda_device(device); });
  void* const stream = options.stream;
  tune::LazyRunner runner([&make_runner, stream] {
    check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize (before tuning)");
    return make_runner();
  });
  const bool capturing = fmha::stream_is_capturing(stream);
  CudaConfigChoice result;
  result.choice = tuner->choose(key, options.no_tuning ? nullptr : &runner, capturing);
  result.is_default = result.choice.config == tuner->default_choice(key);
  if (capturing && !options.no_tuning && result.choice.source == tune::ChoiceSource::default_config) {
    const tune::TunerSettings settings = tuner->settings();
    result.provisional = settings.mode == tune::TuneMode::on && !settings.deterministic && settings.enabled(exact.op);
  }
  return result;
}

}  // namespace attnkit::cuda
