#include "tensor_slice.hpp"

#include <cstddef>

namespace attnkit::cli {

TensorView slice(const TensorView& view, int dim, int64_t start, int64_t count) {
  TensorView part = view;
  const auto index = static_cast<std::size_t>(dim);
  part.data =
      static_cast<std::byte*>(view.data) + start * view.strides[index] * static_cast<int64_t>(dtype_size(view.dtype));
  part.extents[index] = count;
  return part;
}

TensorView slice_unless_broadcast(const TensorView& view, int dim, int64_t start, int64_t count) {
  return view.extents[static_cast<std::size_t>(dim)] == 1 ? view : slice(view, dim, start, count);
}

}  // namespace attnkit::cli
