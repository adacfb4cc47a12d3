// The density of a block or element mask in host memory (the fraction of true entries), which is
// part of a sparse problem's tuning key (tune/extent_bucket.hpp rounds it to a power of two). Counting
// reads the mask, [B|1, H|1, rows, cols] with any strides — every row up to 2^20 entries, evenly
// spaced whole rows beyond; a mask of another kind gives 1.
#pragma once
#include "attnkit/attention.hpp"

namespace attnkit::tune {

double host_mask_density(const AttentionMask& mask);

}  // namespace attnkit::tune
