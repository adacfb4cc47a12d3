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

// Points a launch made for one problem at the tensors of another with the same plan key (shapes,
// strides, alignment, mask): make_forward_launch(b, ...) equals rebind_forward_launch of
// make_forward_launch(a, ...) to b, byte for byte. Plans make the launch once and rebind it per run.
void rebind_forward_launch(FmhaLaunch& launch, const AttentionForward& problem);

}  // namespace attnkit::cuda::fmha
