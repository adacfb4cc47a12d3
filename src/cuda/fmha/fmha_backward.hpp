// Host entry of the portable fused-attention backward on CUDA tensors: capability checks, config
// choice (the tuner's, over the backward registry), workspace layout, launch of the preprocess, dK/dV and dQ kernels
// (fast mode: dQ accumulated by the dK/dV kernel, then converted) on the caller's stream.
#pragma once
#include <cstdint>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::fmha {

void run_backward(const AttentionBackward& problem, const detail::AttentionShape& shape, const RunOptions& options);
// Bytes of RunOptions::workspace the backward uses (per-row LSE in log2 units and delta = rowsum(dO*O),
// tile classes and lists for block and element masks, the fp32 dQ accumulator of 4 * B * Sq * Hq * D
// bytes in fast mode and in the Hopper tier's deterministic mode, which adds its turn counters and rank
// table; KV-split partials).
int64_t backward_workspace_size(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                const RunOptions& options);

}  // namespace attnkit::cuda::fmha
