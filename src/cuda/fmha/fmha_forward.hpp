// Host entry of the CUDA fused-attention forward: the plan of a call shape (core/op_plan.hpp). Made once:
// capability checks, the device's limits, the kernel choice (fmha_forward_selection.hpp) and the launch
// params (Arguments -> Params, fmha_arguments.hpp); each run points the params at the call's tensors and
// launches on the caller's stream.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_plan.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::fmha {

// The Q-tile x KV-tile shape a plan's kernel works in (the element-mask path choice counts tiles of it).
struct ForwardTileShape {
  int block_m = 0;
  int block_n = 0;
};

// Throws Status::unsupported when no compiled kernel runs the problem on its device. `tile_shape`, when
// given, receives the chosen kernel's tile shape.
detail::MadePlan<AttentionForward> make_forward_plan(const AttentionForward& problem,
                                                     const detail::AttentionShape& shape, const RunOptions& options,
                                                     ForwardTileShape* tile_shape = nullptr);

}  // namespace attnkit::cuda::fmha
