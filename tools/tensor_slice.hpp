// Sub-views of a strided tensor without copying: the --check references run on slices of their
// problem (one batch entry and a few heads at a time) so they can report progress.
#pragma once
#include <cstdint>

#include "attnkit/tensor.hpp"

namespace attnkit::cli {

// `count` entries of dimension `dim` starting at `start`; strides unchanged.
TensorView slice(const TensorView& view, int dim, int64_t start, int64_t count);

// As slice(), but a dimension of extent 1 is kept whole: it broadcasts (e.g. a mask's [B|1, H|1, ...]).
TensorView slice_unless_broadcast(const TensorView& view, int dim, int64_t start, int64_t count);

}  // namespace attnkit::cli
