// The attended (query, key) pairs of an attention problem, summed over batch and query heads:
// the useful work that FLOP counts are based on (DESIGN §5: 4*B*Hq*pairs*D forward). Counted
// exactly from the mask's definition (DESIGN §3), never estimated from density.
#pragma once
#include <cstdint>

#include "attnkit/attention.hpp"
#include "cli_tensor.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cli {

// `mask_values` holds the block or element mask on the host (contiguous, as in mask.*_mask's
// extents); unused for other mask kinds.
double attended_pairs(const AttentionMask& mask, const detail::AttentionShape& shape, const HostTensor* mask_values);

}  // namespace attnkit::cli
