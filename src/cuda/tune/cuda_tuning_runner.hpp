// The CUDA tuning runner of any op the CUDA backend tunes, for callers that time a list of problems of
// several ops (offline tuning, `attnkit tune --optimize`): FmhaAttentionRunner for attention_fwd /
// attention_bwd, GemmTuningRunner for gemm, RetentionTuningRunner for retention_fwd / retention_bwd.
#pragma once
#include <cstdint>
#include <memory>

#include "tune/runner.hpp"

namespace attnkit::cuda {

// Throws Status::unsupported for an op or dtype no CUDA runner times.
std::unique_ptr<tune::Runner> make_cuda_tuning_runner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes);

}  // namespace attnkit::cuda
