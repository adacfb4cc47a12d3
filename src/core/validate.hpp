// Validation of every public entry point (DESIGN §4). Each function throws attnkit::Error naming
// the argument, the value received and what is allowed, before anything is written. Backend
// capability checks (dtypes and head dims a GPU tier supports) live with that backend.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"

namespace attnkit::detail {

void validate_attention_forward(const AttentionForward& problem, const RunOptions& options);
void validate_attention_backward(const AttentionBackward& problem, const RunOptions& options);
void validate_retention_forward(const RetentionForward& problem, const RunOptions& options);
void validate_retention_backward(const RetentionBackward& problem, const RunOptions& options);
void validate_gemm(const GemmProblem& problem, const RunOptions& options);

// The backend a call runs on: options.backend, or the tensors' device when automatic. Throws when
// the backend and the device disagree or the backend is not compiled in.
Backend resolve_backend(Backend requested, const Device& device);

}  // namespace attnkit::detail
