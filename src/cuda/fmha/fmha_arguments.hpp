// Arguments -> Params for the portable forward kernel: what the CUDA kernels can run (capability checks
// that throw Status::unsupported naming the argument, the value and what is allowed) and the
// translation of a validated AttentionForward into an FmhaLaunch for a chosen config.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_configs.hpp"

namespace attnkit::cuda::fmha {

FmhaPolicyKind fmha_policy_for(MaskKind kind);

// Throws Status::unsupported when the problem is valid but outside what these kernels run.
void check_forward_supported(const AttentionForward& problem, const detail::AttentionShape& shape);

FmhaLaunch make_forward_launch(const AttentionForward& problem, const detail::AttentionShape& shape,
                               const FmhaConfig& config);

}  // namespace attnkit::cuda::fmha
