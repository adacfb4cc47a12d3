// Host entry of the CUDA fused-attention forward: the plan of a call shape (core/op_plan.hpp). Made once:
// capability checks, the device's limits, the kernel choice (fmha_forward_selection.hpp) and the launch
// params (Arguments -> Params, fmha_arguments.hpp); each run points the params at the call's tensors and
// launches on the caller's stream.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_plan.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::fmha {

// Throws Status::unsupported when no compiled kernel runs the problem on its device.
detail::MadePlan<AttentionForward> make_forward_plan(const AttentionForward& problem,
                                                     const detail::AttentionShape& shape, const RunOptions& options);

}  // namespace attnkit::cuda::fmha
