#include "attnkit/tensor.hpp"

#include <sstream>

#include "attnkit/error.hpp"

namespace attnkit {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= extents[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (extents[i] != 1 && strides[i] != expected) return false;
    expected *= extents[i];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::ostringstream out;
  out << '[';
  for (int i = 0; i < rank; ++i) out << (i ? ", " : "") << extents[i];
  out << ']';
  return out.str();
}

TensorView make_view(void* data, DType dtype, int32_t rank, const int64_t* extents, Device device) {
  if (rank < 0 || rank > kMaxRank) {
    throw Error(Status::invalid_argument,
                "make_view: rank " + std::to_string(rank) + " is not allowed; allowed: 0.." + std::to_string(kMaxRank));
  }
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    view.extents[i] = extents[i];
    view.strides[i] = stride;
    stride *= extents[i];
  }
  return view;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> extents, Device device) {
  return make_view(data, dtype, static_cast<int32_t>(extents.size()), extents.begin(), device);
}

}  // namespace attnkit
