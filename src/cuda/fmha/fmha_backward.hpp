// Host entry of the CUDA fused-attention backward: the plan of a call shape (core/op_plan.hpp). Made once:
// capability checks, the config choice (the tuner's, over the backward registry), the launch params with
// the KV-split choice and the workspace layout; each run points the params at the call's tensors and
// launches the preprocess, dK/dV and dQ kernels (fast mode: dQ accumulated by the dK/dV kernel, then
// converted) on the caller's stream.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_plan.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::fmha {

// Throws Status::unsupported when no compiled kernel runs the problem on its device.
detail::MadePlan<AttentionBackward> make_backward_plan(const AttentionBackward& problem,
                                                       const detail::AttentionShape& shape, const RunOptions& options);

}  // namespace attnkit::cuda::fmha
