#include "core/retention_plan.hpp"

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "core/validate.hpp"
#include "core/zero_size.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "tune/stable_hash.hpp"

namespace attnkit::detail {
namespace {

PlanCache<RetentionForwardPlan>& forward_plans() {
  static PlanCache<RetentionForwardPlan> cache;
  return cache;
}

PlanCache<RetentionBackwardPlan>& backward_plans() {
  static PlanCache<RetentionBackwardPlan> cache;
  return cache;
}

// gamma's values in one word (a 64-bit FNV-1a of their bit patterns) and its length in another.
void add_gamma(PlanKey& key, const std::vector<double>& gamma) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const double value : gamma) {
    hash ^= std::bit_cast<uint64_t>(value);
    hash *= 0x100000001b3ull;
  }
  key.add(static_cast<int64_t>(gamma.size()));
  key.add(static_cast<int64_t>(hash));
}

// ATTNKIT_RETENTION_CONFIG (cuda/retention/retention_jobs.hpp's forced shape, read when a plan is made) as two
// words, its length and a 64-bit FNV-1a of its bytes (unset and empty alike: no forcing), so that a process that
// changes it between calls gets a plan made under the new value instead of the cached one.
void add_forced_config(PlanKey& key) {
  const char* text = std::getenv("ATTNKIT_RETENTION_CONFIG");
  const std::string_view config = text != nullptr ? text : "";
  key.add(static_cast<int64_t>(config.size()));
  key.add(static_cast<int64_t>(tune::stable_hash(config)));
}

template <class Problem>
void add_scalars(PlanKey& key, const Problem& problem) {
  add_forced_config(key);
  add_gamma(key, problem.gamma);
  key.add(static_cast<int64_t>(problem.mode));
  key.add(problem.chunk_size);
  key.add(problem.scale);
  key.add(int64_t{problem.normalize});
  key.add(problem.decay);
}

// B, H, Dk or Dv is 0: the outputs that have elements are zeros (core/zero_size.hpp).
template <class Problem>
class NoKernelRetentionPlan final : public OpPlan<Problem> {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const Problem& problem, const RunOptions& options) const override {
    write_zero_size_result(problem, options);
  }
  TunedConfig config() const override { return {"none", "default"}; }
};

// The CPU backend decides its threading per call; it has nothing to select ahead.
class CpuRetentionForwardPlan final : public RetentionForwardPlan {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const RetentionForward& problem, const RunOptions& options) const override {
    cpu::retention_forward(problem, options);
  }
  TunedConfig config() const override { return {"cpu", "default"}; }
};

class CpuRetentionBackwardPlan final : public RetentionBackwardPlan {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const RetentionBackward& problem, const RunOptions& options) const override {
    cpu::retention_backward(problem, options);
  }
  TunedConfig config() const override { return {"cpu", "default"}; }
};

}  // namespace

PlanKey retention_forward_key(const RetentionForward& problem, const RunOptions& options) {
  PlanKey key;
  for (const TensorView* view :
       {&problem.q, &problem.k, &problem.v, &problem.out, &problem.initial_state, &problem.final_state}) {
    key.add(*view);
  }
  add_scalars(key, problem);
  key.add(options);
  return key;
}

PlanKey retention_backward_key(const RetentionBackward& problem, const RunOptions& options) {
  PlanKey key;
  for (const TensorView* view :
       {&problem.q, &problem.k, &problem.v, &problem.grad_out, &problem.initial_state, &problem.grad_final_state,
        &problem.grad_q, &problem.grad_k, &problem.grad_v, &problem.grad_initial_state}) {
    key.add(*view);
  }
  add_scalars(key, problem);
  key.add(options);
  return key;
}

std::shared_ptr<const RetentionForwardPlan> retention_forward_plan(const RetentionForward& problem,
                                                                   const RunOptions& options) {
  return cached_plan<RetentionForward>(forward_plans(), retention_forward_key(problem, options),
                                       [&]() -> MadePlan<RetentionForward> {
                                         validate_retention_forward(problem, options);
                                         const Backend backend = resolve_backend(options.backend, problem.q.device);
                                         if (retention_forward_needs_no_kernel(problem)) {
                                           return {std::make_unique<NoKernelRetentionPlan<RetentionForward>>()};
                                         }
                                         if (backend == Backend::cuda)
                                           return cuda::make_retention_forward_plan(problem, options);
                                         return {std::make_unique<CpuRetentionForwardPlan>()};
                                       });
}

std::shared_ptr<const RetentionBackwardPlan> retention_backward_plan(const RetentionBackward& problem,
                                                                     const RunOptions& options) {
  return cached_plan<RetentionBackward>(backward_plans(), retention_backward_key(problem, options),
                                        [&]() -> MadePlan<RetentionBackward> {
                                          validate_retention_backward(problem, options);
                                          const Backend backend = resolve_backend(options.backend, problem.q.device);
                                          if (retention_backward_needs_no_kernel(problem)) {
                                            return {std::make_unique<NoKernelRetentionPlan<RetentionBackward>>()};
                                          }
                                          if (backend == Backend::cuda)
                                            return cuda::make_retention_backward_plan(problem, options);
                                          return {std::make_unique<CpuRetentionBackwardPlan>()};
                                        });
}

void clear_retention_plans() {
  forward_plans().clear();
  backward_plans().clear();
}

}  // namespace attnkit::detail
