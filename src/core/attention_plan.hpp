// Plans of the attention ops (op_plan.hpp): the key of a call, and the cached plan that validates,
// resolves the backend and selects the kernel once per key. Every attention entry point (C++ API, C
// ABI, the *_config queries) goes through these, so a call, its workspace query and its config query
// agree.
#pragma once
#include <memory>

#include "attnkit/attention.hpp"
#include "core/op_plan.hpp"
#include "core/plan_key.hpp"

namespace attnkit::detail {

using AttentionForwardPlan = OpPlan<AttentionForward>;
using AttentionBackwardPlan = OpPlan<AttentionBackward>;

PlanKey attention_forward_key(const AttentionForward& problem, const RunOptions& options);
PlanKey attention_backward_key(const AttentionBackward& problem, const RunOptions& options);

// Throws attnkit::Error (validation, backend capabilities) exactly as the call itself would.
std::shared_ptr<const AttentionForwardPlan> attention_forward_plan(const AttentionForward& problem,
                                                                   const RunOptions& options);
std::shared_ptr<const AttentionBackwardPlan> attention_backward_plan(const AttentionBackward& problem,
                                                                     const RunOptions& options);

// The config a call runs with (attention_*_config): its plan's, reported as coming from the "cache"
// when the plan was already made and its choice was tuned then (the winner is now a known one).
TunedConfig attention_forward_config_of(const AttentionForward& problem, const RunOptions& options);
TunedConfig attention_backward_config_of(const AttentionBackward& problem, const RunOptions& options);

// Drops every cached attention plan. Plans read the environment's forced-config variables
// (ATTNKIT_FMHA_CONFIG, ATTNKIT_FMHA_BACKWARD_CONFIG) when they are made: tests that set them call this.
void clear_attention_plans();

}  // namespace attnkit::detail
