// Arguments -> Params for the portable backward: what the CUDA backward can run (capability checks that
// throw Status::unsupported naming the argument, the value and what is allowed) and the translation of
// a validated AttentionBackward into an FmhaBackwardLaunch for a chosen config.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"

namespace attnkit::cuda::fmha {

FmhaBackwardPolicy fmha_backward_policy_for(MaskKind kind);

// Throws Status::unsupported when the problem is valid but outside what these kernels run.
void check_backward_supported(const AttentionBackward& problem, const detail::AttentionShape& shape);

// `multiprocessors`: SMs of the device (the KV-parallel split choice, fmha_backward_split.hpp; 0 = unknown:
// only an explicit kv_splits splits).
FmhaBackwardLaunch make_backward_launch(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                        const FmhaBackwardConfig& config, int multiprocessors);

// Points a launch made for one problem at the tensors of another with the same plan key, as
// rebind_forward_launch does for the forward (the result equals make_backward_launch of that problem).
void rebind_backward_launch(FmhaBackwardLaunch& launch, const AttentionBackward& problem);

}  // namespace attnkit::cuda::fmha
