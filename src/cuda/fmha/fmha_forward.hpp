// Host entry of the portable fused-attention forward on CUDA tensors: capability checks, device
// selection, config choice from the registry, Arguments -> Params, launch on the caller's stream.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::fmha {

void run_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options);
// Bytes of RunOptions::workspace the forward uses (tile-list masks: classified and compacted tiles).
int64_t forward_workspace_size(const AttentionForward& problem, const detail::AttentionShape& shape,
                               const RunOptions& options);

}  // namespace attnkit::cuda::fmha
