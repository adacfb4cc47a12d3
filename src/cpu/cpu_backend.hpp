// Entry points of the CPU backend (the reference oracle). Called after validation.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cpu {

void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options);
void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options);
void retention_forward(const RetentionForward& problem, const RunOptions& options);
void retention_backward(const RetentionBackward& problem, const RunOptions& options);
void gemm(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cpu
