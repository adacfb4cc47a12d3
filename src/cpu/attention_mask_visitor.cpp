#include "cpu/attention_mask_visitor.hpp"

#include <algorithm>

#include "core/neighborhood_window.hpp"

namespace attnkit::cpu {
namespace {

// Bool tensors are read as bytes: any non-zero byte is true, so a uint8 buffer works too.
bool mask_bit(const TensorView& view, int64_t offset) { return static_cast<const uint8_t*>(view.data)[offset] != 0; }

// Offset of [b, h, row, 0] in a [B|1, H|1, rows, cols] mask; extent-1 dimensions broadcast.
int64_t mask_row_offset(const TensorView& view, int64_t b, int64_t h, int64_t row) {
  return (view.extents[0] == 1 ? 0 : b * view.strides[0]) + (view.extents[1] == 1 ? 0 : h * view.strides[1]) +
         row * view.strides[2];
}

}  // namespace

AttentionMaskVisitor::AttentionMaskVisitor(const AttentionMask& mask, const detail::AttentionShape& shape)
    : mask_(mask), shape_(shape) {
  if (mask.kind != MaskKind::neighborhood) return;
  const int dims = shape.token_dims;
  std::array<std::vector<int64_t>, kMaxTokenDims> coordinate_of_position;
  for (int d = 0; d < dims; ++d) {
    const NeighborhoodDim& nd = mask.neighborhood[d];
    const int64_t extent = shape.tokens[d];
    // Groups are laid out one after the other: group r starts after the tokens of groups 0..r-1.
    std::vector<int64_t> group_offset(static_cast<size_t>(nd.dilation) + 1, 0);
    for (int64_t r = 0; r < nd.dilation; ++r) {
      group_offset[r + 1] = group_offset[r] + detail::dilation_group_size(extent, nd.dilation, r);
    }
    auto& coordinates = coordinate_of_position[d];
    auto& windows = window_of_position_[d];
    coordinates.resize(static_cast<size_t>(extent));
    windows.resize(static_cast<size_t>(extent));
    for (int64_t x = 0; x < extent; ++x) {
      const auto window =
          detail::neighborhood_window_of_coordinate(x, extent, nd.kernel_size, nd.dilation, nd.stride, nd.causal);
      const int64_t base = group_offset[window.group];
      const int64_t position = base + x / nd.dilation;
      coordinates[position] = x;
      windows[position] = {base + window.indices.begin, base + window.indices.end};
    }
  }
  order_.resize(static_cast<size_t>(shape.seq_k));
  for (int64_t position = 0; position < shape.seq_k; ++position) {
    int64_t rest = position;
    int64_t token = 0;
    int64_t token_stride = 1;
    for (int d = dims - 1; d >= 0; --d) {
      token += coordinate_of_position[d][rest % shape.tokens[d]] * token_stride;
      rest /= shape.tokens[d];
      token_stride *= shape.tokens[d];
    }
    order_[position] = token;
  }
}

void AttentionMaskVisitor::visible_keys(int64_t b, int64_t h, int64_t row, std::vector<KeyRun>& runs) const {
  runs.clear();
  const int64_t seq_k = shape_.seq_k;
  switch (mask_.kind) {
    case MaskKind::none: append_run(runs, 0, seq_k); return;
    case MaskKind::causal: {
      const int64_t last = mask_.causal_alignment == CausalAlignment::top_left ? row : row + seq_k - shape_.seq_q;
      append_run(runs, 0, std::clamp<int64_t>(last + 1, 0, seq_k));
      return;
    }
    case MaskKind::neighborhood: neighborhood_keys(row, runs); return;
    case MaskKind::block: block_keys(b, h, row, runs); return;
    case MaskKind::element: element_keys(b, h, row, runs); return;
  }
}

int64_t AttentionMaskVisitor::max_keys_per_row() const {
  if (mask_.kind != MaskKind::neighborhood) return shape_.seq_k;
  int64_t keys = 1;
  for (int d = 0; d < shape_.token_dims; ++d) keys *= mask_.neighborhood[d].kernel_size;
  return keys;
}

int64_t AttentionMaskVisitor::max_runs_per_row() const {
  switch (mask_.kind) {
    case MaskKind::none:
    case MaskKind::causal: return 1;
    case MaskKind::neighborhood: return max_keys_per_row() / mask_.neighborhood[shape_.token_dims - 1].kernel_size;
    case MaskKind::block: return (mask_.block_mask.extents[3] + 1) / 2;
    case MaskKind::element: return (shape_.seq_k + 1) / 2;
  }
  return shape_.seq_k;
}

int64_t AttentionMaskVisitor::rows_per_line() const {
  return mask_.kind == MaskKind::neighborhood ? shape_.tokens[shape_.token_dims - 1] : shape_.seq_q;
}

void AttentionMaskVisitor::neighborhood_keys(int64_t row, std::vector<KeyRun>& runs) const {
  // Pad to three dimensions with leading extent-1 dimensions so one loop nest serves 1-D to 3-D.
  std::array<int64_t, 3> extent{1, 1, 1};
  std::array<KeyRun, 3> window{KeyRun{0, 1}, KeyRun{0, 1}, KeyRun{0, 1}};
  const int dims = shape_.token_dims;
  int64_t rest = row;
  for (int d = dims - 1; d >= 0; --d) {
    const int padded = 3 - dims + d;
    extent[padded] = shape_.tokens[d];
    window[padded] = window_of_position_[d][rest % shape_.tokens[d]];
    rest /= shape_.tokens[d];
  }
  for (int64_t x0 = window[0].begin; x0 < window[0].end; ++x0) {
    for (int64_t x1 = window[1].begin; x1 < window[1].end; ++x1) {
      const int64_t line = (x0 * extent[1] + x1) * extent[2];
      append_run(runs, line + window[2].begin, line + window[2].end);
    }
  }
}

void AttentionMaskVisitor::block_keys(int64_t b, int64_t h, int64_t query, std::vector<KeyRun>& runs) const {
  const TensorView& view = mask_.block_mask;
  const int64_t key_blocks = view.extents[3];
  const int64_t base = mask_row_offset(view, b, h, query / mask_.block_q);
  for (int64_t kb = 0; kb < key_blocks; ++kb) {
    if (mask_bit(view, base + kb * view.strides[3])) {
      append_run(runs, kb * mask_.block_k, std::min((kb + 1) * mask_.block_k, shape_.seq_k));
    }
  }
}

void AttentionMaskVisitor::element_keys(int64_t b, int64_t h, int64_t query, std::vector<KeyRun>& runs) const {
  const TensorView& view = mask_.element_mask;
  const int64_t base = mask_row_offset(view, b, h, query);
  const int64_t step = view.strides[3];
  int64_t j = 0;
  while (j < shape_.seq_k) {
    while (j < shape_.seq_k && !mask_bit(view, base + j * step)) ++j;
    const int64_t begin = j;
    while (j < shape_.seq_k && mask_bit(view, base + j * step)) ++j;
    append_run(runs, begin, j);
  }
}

}  // namespace attnkit::cpu
