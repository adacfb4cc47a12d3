#include "core/gemm_plan.hpp"

#include <memory>

#include "core/validate.hpp"
#include "core/zero_size.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit::detail {
namespace {

PlanCache<GemmPlan>& gemm_plans() {
  static PlanCache<GemmPlan> cache;
  return cache;
}

// C has no elements: nothing is read or written.
class NoKernelGemmPlan final : public GemmPlan {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const GemmProblem&, const RunOptions&) const override {}
  TunedConfig config() const override { return {"none", "default"}; }
};

// The CPU backend selects its blocking per call (it depends on the thread count only).
class CpuGemmPlan final : public GemmPlan {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const GemmProblem& problem, const RunOptions& options) const override { cpu::gemm(problem, options); }
  TunedConfig config() const override { return {"cpu", "default"}; }
};

}  // namespace

PlanKey gemm_key(const GemmProblem& problem, const RunOptions& options) {
  PlanKey key;
  key.add(problem.a);
  key.add(problem.b);
  key.add(problem.c);
  key.add(int64_t{problem.transpose_a} | int64_t{problem.transpose_b} << 1 | int64_t{problem.allow_tf32} << 2 |
          int64_t{problem.alpha == 0.0} << 3);
  key.add(options);
  return key;
}

std::shared_ptr<const GemmPlan> gemm_plan(const GemmProblem& problem, const RunOptions& options) {
  return cached_plan<GemmProblem>(gemm_plans(), gemm_key(problem, options), [&]() -> MadePlan<GemmProblem> {
    validate_gemm(problem, options);
    const Backend backend = resolve_backend(options.backend, problem.a.device);
    if (gemm_needs_no_kernel(problem)) return {std::make_unique<NoKernelGemmPlan>()};
    if (backend == Backend::cuda) return cuda::make_gemm_plan(problem, options);
    return {std::make_unique<CpuGemmPlan>()};
  });
}

void clear_gemm_plans() { gemm_plans().clear(); }

}  // namespace attnkit::detail
