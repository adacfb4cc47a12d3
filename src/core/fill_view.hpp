// Writing one value into every element of a strided view, on the view's device: the only memory a
// zero-size problem touches (zero_size.hpp). The view has passed validation (rank 1 to 8, extents >= 0,
// last dimension contiguous); a view with no elements is left alone.
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::detail {

// CPU views are written at once; CUDA views with memsets enqueued on options.stream, on the view's
// device, one per 2-D block of its last two dimensions (capturable in a CUDA graph).
void fill_view(const TensorView& view, double value, const RunOptions& options);

}  // namespace attnkit::detail
