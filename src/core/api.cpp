// The public entry points: validate, describe, then hand over to the backend that runs the call.
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit {

void attention_forward(const AttentionForward& problem, const RunOptions& options) {
  detail::validate_attention_forward(problem, options);
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  if (detail::resolve_backend(options.backend, problem.q.device) == Backend::cuda) {
    cuda::attention_forward(problem, shape, options);
  } else {
    cpu::attention_forward(problem, shape, options);
  }
}

void attention_backward(const AttentionBackward& problem, const RunOptions& options) {
  detail::validate_attention_backward(problem, options);
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  if (detail::resolve_backend(options.backend, problem.q.device) == Backend::cuda) {
    cuda::attention_backward(problem, shape, options);
  } else {
    cpu::attention_backward(problem, shape, options);
  }
}

int64_t attention_forward_workspace_size(const AttentionForward& problem, const RunOptions& options) {
  detail::validate_attention_forward(problem, options);
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  if (detail::resolve_backend(options.backend, problem.q.device) != Backend::cuda) return 0;
  return cuda::attention_forward_workspace_size(problem, shape, options);
}

int64_t attention_backward_workspace_size(const AttentionBackward& problem, const RunOptions& options) {
  detail::validate_attention_backward(problem, options);
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  if (detail::resolve_backend(options.backend, problem.q.device) != Backend::cuda) return 0;
  return cuda::attention_backward_workspace_size(problem, shape, options);
}

void retention_forward(const RetentionForward& problem, const RunOptions& options) {
  detail::validate_retention_forward(problem, options);
  if (detail::resolve_backend(options.backend, problem.q.device) == Backend::cuda) {
    cuda::retention_forward(problem, options);
  } else {
    cpu::retention_forward(problem, options);
  }
}

void retention_backward(const RetentionBackward& problem, const RunOptions& options) {
  detail::validate_retention_backward(problem, options);
  if (detail::resolve_backend(options.backend, problem.q.device) == Backend::cuda) {
    cuda::retention_backward(problem, options);
  } else {
    cpu::retention_backward(problem, options);
  }
}

void gemm(const GemmProblem& problem, const RunOptions& options) {
  detail::validate_gemm(problem, options);
  if (detail::resolve_backend(options.backend, problem.a.device) == Backend::cuda) {
    cuda::gemm(problem, options);
  } else {
    cpu::gemm(problem, options);
  }
}

}  // namespace attnkit
