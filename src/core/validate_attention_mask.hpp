// Validation of an AttentionMask against the q and k views it will be applied to (DESIGN §3):
// its kind and alignment, the neighborhood parameters per token dimension, and the block / element
// mask tensors' dtype, device and extents. q and k have passed the attention tensor checks.
#pragma once
#include "attnkit/attention.hpp"

namespace attnkit::detail {

void validate_attention_mask(const AttentionMask& mask, const TensorView& q, const TensorView& k);

// The backward's optional grad_rpb: only with mask.rpb (already validated), of its shape, dtype and device.
void validate_positional_bias_gradient(const TensorView& grad_rpb, const AttentionMask& mask);

}  // namespace attnkit::detail
