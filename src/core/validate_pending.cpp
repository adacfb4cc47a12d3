// TEMPORARY: placeholder bodies until src/core/validate_*.cpp land (owned by the validation work).
// Delete this file when the real validators exist.
#include "core/validate.hpp"

namespace attnkit::detail {
void validate_attention_forward(const AttentionForward&, const RunOptions&) {}
void validate_attention_backward(const AttentionBackward&, const RunOptions&) {}
void validate_retention_forward(const RetentionForward&, const RunOptions&) {}
void validate_retention_backward(const RetentionBackward&, const RunOptions&) {}
void validate_gemm(const GemmProblem&, const RunOptions&) {}
}  // namespace attnkit::detail
