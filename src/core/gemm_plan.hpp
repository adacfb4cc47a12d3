// The plan of a gemm call (op_plan.hpp): validated, its backend resolved and its kernel selected once
// per call shape, then run. The key holds the three views (shape, strides, dtype, device, address
// alignment), the transposes, allow_tf32, whether alpha is 0 (then A and B are never read) and the run
// options; alpha and beta themselves are run-time values, read from the problem on every run.
#pragma once
#include <memory>

#include "attnkit/gemm.hpp"
#include "core/op_plan.hpp"
#include "core/plan_key.hpp"

namespace attnkit::detail {

using GemmPlan = OpPlan<GemmProblem>;

PlanKey gemm_key(const GemmProblem& problem, const RunOptions& options);

// Throws attnkit::Error (validation, backend capabilities) exactly as the call itself would.
std::shared_ptr<const GemmPlan> gemm_plan(const GemmProblem& problem, const RunOptions& options);

// Drops every cached gemm plan (tests that force a kernel through the environment).
void clear_gemm_plans();

}  // namespace attnkit::detail
