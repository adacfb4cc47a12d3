// A tune::Runner that times the CUDA GEMM's registry entries on a GPU, the way every CUDA tuning runner
// does (gpu_run_timer.hpp): the problem's packed operands (gemm_config_space.hpp's gemm_tuning_shape: the
// spec's M, N, K, batch and majorness) in several buffer sets used in turn (cold L2), each run bracketed by
// CUDA events on the runner's own held stream. A run is what a plan's run is: the entry's GemmRunner (made
// once per config, with the operands staged when the entry needs it, gemm_staging.hpp) on one set's
// pointers, alpha 1, beta 0, with the timer's workspace (GpuRunTimer::workspace). Every config, the default included,
// runs on the same sets, stream and workspace; an entry that refuses the problem, or whose launch fails, throws, which
// excludes it. The runner never runs while a caller's stream is capturing (the plan checks first).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "cuda/tune/gpu_run_timer.hpp"
#include "tune/runner.hpp"

namespace attnkit::cuda::gemm {

class GemmTuningRunner : public tune::Runner {
 public:
  // spec.op: gemm (f16, bf16 or f32). `l2_bytes` sizes the rotation.
  GemmTuningRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed = 1);
  ~GemmTuningRunner() override;
  GemmTuningRunner(const GemmTuningRunner&) = delete;
  GemmTuningRunner& operator=(const GemmTuningRunner&) = delete;

  double measure_seconds(const tune::Config& config, int iteration) override;
  int buffer_sets() const { return static_cast<int>(sets_.size()); }

 private:
  void build(int64_t l2_bytes, uint64_t seed);
  const GemmRunner& runner_for(const tune::Config& config);
  void release() noexcept;

  tune::ProblemSpec spec_;
  GemmShape shape_;  // placeholders for the pointers; each set binds its own
  bool allow_tf32_ = false;
  int device_ = 0;
  std::unique_ptr<GpuRunTimer> timer_;
  std::vector<void*> sets_;  // one allocation per set: A, B, C
  int64_t b_offset_ = 0, c_offset_ = 0;
  std::map<std::string, std::unique_ptr<GemmRunner>> runners_;  // by config id
};

}  // namespace attnkit::cuda::gemm
