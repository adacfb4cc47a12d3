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
// The retention plans (core/retention_plan.hpp) of validated problems that need a kernel.
detail::MadePlan<RetentionForward> make_retention_forward_plan(const RetentionForward& problem,
                                                               const RunOptions& options);
detail::MadePlan<RetentionBackward> make_retention_backward_plan(const RetentionBackward& problem,
                                                                 const RunOptions& options);
// The gemm plan (core/gemm_plan.hpp) of a validated problem whose C has elements.
detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cuda
