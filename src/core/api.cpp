// The public entry points. Every op goes through its cached plan (core/attention_plan.hpp,
// core/retention_plan.hpp, core/gemm_plan.hpp): validated and its kernel selected once per call shape,
// then run; a zero-size problem's plan writes what the definition fixes (core/zero_size.hpp).
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_plan.hpp"
#include "core/gemm_plan.hpp"
#include "core/retention_plan.hpp"
#include "core/validate.hpp"
#include "core/zero_size.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit {

void attention_forward(const AttentionForward& problem, const RunOptions& options) {
  detail::attention_forward_plan(problem, options)->run(problem, options);
}

void attention_backward(const AttentionBackward& problem, const RunOptions& options) {
  detail::attention_backward_plan(problem, options)->run(problem, options);
}

int64_t attention_forward_workspace_size(const AttentionForward& problem, const RunOptions& options) {
  return detail::attention_forward_plan(problem, options)->workspace_bytes();
}

int64_t attention_backward_workspace_size(const AttentionBackward& problem, const RunOptions& options) {
  return detail::attention_backward_plan(problem, options)->workspace_bytes();
}

// Through their cached plans (core/retention_plan.hpp): validated and selected once per call shape.
void retention_forward(const RetentionForward& problem, const RunOptions& options) {
  detail::retention_forward_plan(problem, options)->run(problem, options);
}

void retention_backward(const RetentionBackward& problem, const RunOptions& options) {
  detail::retention_backward_plan(problem, options)->run(problem, options);
}

// Through its cached plan (core/gemm_plan.hpp): validated and selected once per call shape.
void gemm(const GemmProblem& problem, const RunOptions& options) {
  detail::gemm_plan(problem, options)->run(problem, options);
}

}  // namespace attnkit
