// The plans of the retention ops (op_plan.hpp): validated, their backend resolved and their kernels
// selected once per call shape, then run. The key holds every view (shape, strides, dtype, device,
// address alignment), the mode, chunk size, scale, normalize, the run options and gamma's length and
// bit pattern (folded into one word: validation reads gamma's values). A run reads gamma from the
// problem, so the decay is never stale.
#pragma once
#include <memory>

#include "attnkit/retention.hpp"
#include "core/op_plan.hpp"
#include "core/plan_key.hpp"

namespace attnkit::detail {

using RetentionForwardPlan = OpPlan<RetentionForward>;
using RetentionBackwardPlan = OpPlan<RetentionBackward>;

PlanKey retention_forward_key(const RetentionForward& problem, const RunOptions& options);
PlanKey retention_backward_key(const RetentionBackward& problem, const RunOptions& options);

// Throw attnkit::Error (validation, backend capabilities) exactly as the call itself would.
std::shared_ptr<const RetentionForwardPlan> retention_forward_plan(const RetentionForward& problem,
                                                                   const RunOptions& options);
std::shared_ptr<const RetentionBackwardPlan> retention_backward_plan(const RetentionBackward& problem,
                                                                     const RunOptions& options);

void clear_retention_plans();

}  // namespace attnkit::detail
