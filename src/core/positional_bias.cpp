#include "core/positional_bias.hpp"

#include "core/float_convert.hpp"

namespace attnkit::detail {
namespace {

// Offset of entry `e` of head `h` in a [Hq, 2K_0-1, ...] view with its own strides.
int64_t view_offset(const TensorView& view, int64_t h, int64_t e) {
  int64_t offset = h * view.strides[0];
  for (int d = view.rank - 1; d >= 1; --d) {
    offset += (e % view.extents[d]) * view.strides[d];
    e /= view.extents[d];
  }
  return offset;
}

}  // namespace

PositionalBiasIndex::PositionalBiasIndex(const AttentionMask& mask, const AttentionShape& shape)
    : dims_(mask.rpb.defined() ? shape.token_dims : 0) {
  // Without a bias the neighborhood fields are not the mask's (any values): nothing is computed from them.
  for (int d = dims_ - 1; d >= 0; --d) {
    extents_[d] = shape.tokens[d];
    kernel_[d] = mask.neighborhood[d].kernel_size;
    dilation_[d] = mask.neighborhood[d].dilation;
    table_strides_[d] = entries_;
    entries_ *= 2 * kernel_[d] - 1;
  }
}

template <class T>
std::vector<T> load_positional_bias(const TensorView& rpb, int64_t heads, int64_t entries_per_head) {
  std::vector<T> table(static_cast<size_t>(heads * entries_per_head));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t e = 0; e < entries_per_head; ++e) {
      table[h * entries_per_head + e] = static_cast<T>(load_as_double(rpb.data, rpb.dtype, view_offset(rpb, h, e)));
    }
  }
  return table;
}

template std::vector<float> load_positional_bias<float>(const TensorView&, int64_t, int64_t);
template std::vector<double> load_positional_bias<double>(const TensorView&, int64_t, int64_t);

void store_positional_bias_gradient(const TensorView& grad_rpb, const std::vector<double>& values,
                                    int64_t entries_per_head) {
  const int64_t heads = static_cast<int64_t>(values.size()) / entries_per_head;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t e = 0; e < entries_per_head; ++e) {
      store_from_double(grad_rpb.data, grad_rpb.dtype, view_offset(grad_rpb, h, e), values[h * entries_per_head + e]);
    }
  }
}

}  // namespace attnkit::detail
