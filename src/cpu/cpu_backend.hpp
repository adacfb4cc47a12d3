// Entry points of the CPU backend (the reference oracle). Called after validation; attention through
// plans (core/op_plan.hpp) made once per call shape.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_shape.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cpu {

detail::MadePlan<AttentionForward> make_attention_forward_plan(const AttentionForward& problem,
                                                               const detail::AttentionShape& shape,
                                                               const RunOptions& options);
detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward& problem,
                                                                 const detail::AttentionShape& shape,
                                                                 const RunOptions& options);
void retention_forward(const RetentionForward& problem, const RunOptions& options);
void retention_backward(const RetentionBackward& problem, const RunOptions& options);
void gemm(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cpu
