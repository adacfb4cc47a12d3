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

// The Q-tile x KV-tile shape a plan's kernel works in (the element-mask path choice counts tiles of it).
struct BackwardTileShape {
  int block_m = 0;
  int block_n = 0;
};

// Throws Status::unsupported when no compiled kernel runs the problem on its device. `tile_shape`, when
// given, receives the chosen kernel's tile shape.
detail::MadePlan<AttentionBackward> make_backward_plan(const AttentionBackward& problem,
                                                       const detail::AttentionShape& shape, const RunOptions& options,
                                                       BackwardTileShape* tile_shape = nullptr);

}  // namespace attnkit::cuda::fmha
