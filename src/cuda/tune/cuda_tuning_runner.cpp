#include "cuda/tune/cuda_tuning_runner.hpp"

#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/gemm_tuning_runner.hpp"
#include "cuda/tune/retention_tuning_runner.hpp"

namespace attnkit::cuda {

std::unique_ptr<tune::Runner> make_cuda_tuning_runner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes) {
  switch (spec.op) {
    case tune::TuneOp::gemm: return std::make_unique<gemm::GemmTuningRunner>(spec, device, l2_bytes);
    case tune::TuneOp::retention_forward:
    case tune::TuneOp::retention_backward:
      return std::make_unique<retention::RetentionTuningRunner>(spec, device, l2_bytes);
    case tune::TuneOp::attention_forward:
    case tune::TuneOp::attention_backward: break;
  }
  return std::make_unique<fmha::FmhaAttentionRunner>(spec, device, l2_bytes);
}

}  // namespace attnkit::cuda
