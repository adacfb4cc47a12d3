// Entry points of the CUDA backends. Called after validation; each checks its own capabilities
// (dtypes, head dims, architecture) and throws Status::unsupported with what is allowed.
// In a build without CUDA these throw Status::unsupported saying how to enable CUDA.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/build_info.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda {

bool compiled();
std::vector<DeviceInfo> devices();
std::string runtime_version();
std::string driver_version();

void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options);
void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options);
// Device scratch the call needs (RunOptions::workspace); 0 when none.
int64_t attention_forward_workspace_size(const AttentionForward& problem, const detail::AttentionShape& shape,
                                         const RunOptions& options);
int64_t attention_backward_workspace_size(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                          const RunOptions& options);
void retention_forward(const RetentionForward& problem, const RunOptions& options);
void retention_backward(const RetentionBackward& problem, const RunOptions& options);
void gemm(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cuda
