// Entry points of the CUDA backends. Called after validation; each checks its own capabilities
// (dtypes, head dims, architecture) and throws Status::unsupported with what is allowed.
// In a build without CUDA these throw Status::unsupported saying how to enable CUDA.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/build_info.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_shape.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cuda {

bool compiled();
std::vector<DeviceInfo> devices();
std::string runtime_version();
std::string driver_version();

// Plans of the fused attention (validated problems): Status::unsupported when nothing compiled runs them.
detail::MadePlan<AttentionForward> make_attention_forward_plan(const AttentionForward& problem,
                                                               const detail::AttentionShape& shape,
                                                               const RunOptions& options);
detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward& problem,
                                                                 const detail::AttentionShape& shape,
                                                                 const RunOptions& options);
void retention_forward(const RetentionForward& problem, const RunOptions& options);
void retention_backward(const RetentionBackward& problem, const RunOptions& options);
void gemm(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cuda
