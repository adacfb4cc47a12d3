// A tune::Runner that times the CUDA chunkwise retention's shapes on a GPU (retention_config_space.hpp), the
// way every CUDA tuning runner does (gpu_run_timer.hpp): packed q, k, v [B, T, H, D] and the outputs (forward:
// out; backward: dO and dQ, dK, dV) of the spec's sizes, default gamma, in several buffer sets used in turn
// (cold L2), each run bracketed by CUDA events on the runner's own held stream. A run is what a call's run
// is: the plan a call with that config would hold (retention_plan.hpp's plan_of_selection, made once per
// config from select_forward / select_backward with the config's ChunkShapeChoice), run on one set's tensors
// with the timer's workspace (GpuRunTimer::workspace) (the segment states). Every config, the default included, runs on
// the same sets, stream and workspace; one that cannot shape the problem, or whose launch fails, throws, which excludes
// it. The runner never runs while a caller's stream is capturing (the plan checks first).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/retention.hpp"
#include "core/op_plan.hpp"
#include "cuda/tune/gpu_run_timer.hpp"
#include "tune/runner.hpp"

namespace attnkit::cuda::retention {

class RetentionTuningRunner : public tune::Runner {
 public:
  // spec.op: retention_forward or retention_backward, in f16 or bf16. `l2_bytes` sizes the rotation.
  RetentionTuningRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed = 1);
  ~RetentionTuningRunner() override;
  RetentionTuningRunner(const RetentionTuningRunner&) = delete;
  RetentionTuningRunner& operator=(const RetentionTuningRunner&) = delete;

  double measure_seconds(const tune::Config& config, int iteration) override;
  int buffer_sets() const { return static_cast<int>(sets_.size()); }

 private:
  struct BufferSet {
    void* memory = nullptr;  // one allocation holding every tensor of the set
    RetentionForward forward;
    RetentionBackward backward;
  };
  struct ConfigPlans {
    std::unique_ptr<detail::OpPlan<RetentionForward>> forward;
    std::unique_ptr<detail::OpPlan<RetentionBackward>> backward;
  };

  void build(int64_t l2_bytes, uint64_t seed);
  const ConfigPlans& plans_for(const tune::Config& config);
  void release() noexcept;

  tune::ProblemSpec spec_;
  int device_ = 0;
  int multiprocessors_ = 0;
  int capability_ = 0;                // 10 * major + minor
  double dram_bytes_per_step_ = 0.0;  // dram_bytes_per_step_of(device_)
  std::unique_ptr<GpuRunTimer> timer_;
  std::vector<BufferSet> sets_;
  std::map<std::string, ConfigPlans> plans_;  // by config id
};

}  // namespace attnkit::cuda::retention
