// The public entry points. Attention goes through its cached plan (core/attention_plan.hpp: validated
// and selected once per call shape); the other ops validate, then write the result of a zero-size
// problem that needs no kernel (core/zero_size.hpp) or hand over to the backend that runs the call.
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_plan.hpp"
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

void retention_forward(const RetentionForward& problem, const RunOptions& options) {
  detail::validate_retention_forward(problem, options);
  const Backend backend = detail::resolve_backend(options.backend, problem.q.device);
  if (detail::retention_forward_needs_no_kernel(problem)) {
    detail::write_zero_size_result(problem, options);
  } else if (backend == Backend::cuda) {
    cuda::retention_forward(problem, options);
  } else {
    cpu::retention_forward(problem, options);
  }
}

void retention_backward(const RetentionBackward& problem, const RunOptions& options) {
  detail::validate_retention_backward(problem, options);
  const Backend backend = detail::resolve_backend(options.backend, problem.q.device);
  if (detail::retention_backward_needs_no_kernel(problem)) {
    detail::write_zero_size_result(problem, options);
  } else if (backend == Backend::cuda) {
    cuda::retention_backward(problem, options);
  } else {
    cpu::retention_backward(problem, options);
  }
}

void gemm(const GemmProblem& problem, const RunOptions& options) {
  detail::validate_gemm(problem, options);
  const Backend backend = detail::resolve_backend(options.backend, problem.a.device);
  if (detail::gemm_needs_no_kernel(problem)) return;  // C has no elements: nothing to write
  if (backend == Backend::cuda) {
    cuda::gemm(problem, options);
  } else {
    cpu::gemm(problem, options);
  }
}

}  // namespace attnkit
