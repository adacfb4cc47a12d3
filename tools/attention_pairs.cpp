// Dense: Sq*Sk per (batch, head). Causal: query i sees keys [0, i] (top-left) or
// [0, i + Sk - Sq] (bottom-right). Neighborhood: a query attends a key iff it is in the window in
// every dimension, so the count per (batch, head) is the product over dimensions of the summed
// window sizes. Block and element masks: the true entries, a block weighted by its clipped area.
#include "attention_pairs.hpp"

#include <algorithm>

#include "core/neighborhood_window.hpp"

namespace attnkit::cli {
namespace {

double causal_pairs(const AttentionMask& mask, int64_t seq_q, int64_t seq_k) {
  const int64_t shift = mask.causal_alignment == CausalAlignment::bottom_right ? seq_k - seq_q : 0;
  double pairs = 0.0;
  for (int64_t i = 0; i < seq_q; ++i) {
    pairs += static_cast<double>(std::clamp<int64_t>(i + shift + 1, 0, seq_k));
  }
  return pairs;
}

double neighborhood_pairs(const AttentionMask& mask, const detail::AttentionShape& shape) {
  double pairs = 1.0;
  for (int d = 0; d < mask.dims; ++d) {
    const auto& nd = mask.neighborhood[d];
    const int64_t extent = shape.tokens[d];
    double keys_in_dim = 0.0;
    for (int64_t x = 0; x < extent; ++x) {
      const auto window =
          detail::neighborhood_window_of_coordinate(x, extent, nd.kernel_size, nd.dilation, nd.stride, nd.causal);
      keys_in_dim += static_cast<double>(window.indices.end - window.indices.begin);
    }
    pairs *= keys_in_dim;
  }
  return pairs;
}

// Sum over (b, h) of weight(row, col) for every true mask entry; the mask may broadcast (extent 1).
template <class Weight>
double masked_pairs(const HostTensor& values, const detail::AttentionShape& shape, Weight weight) {
  const auto& e = values.extents();
  double pairs = 0.0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads_q; ++h) {
      const int64_t base = ((e[0] == 1 ? 0 : b) * e[1] + (e[1] == 1 ? 0 : h)) * e[2] * e[3];
      for (int64_t r = 0; r < e[2]; ++r) {
        for (int64_t c = 0; c < e[3]; ++c) {
          if (values.at(base + r * e[3] + c) != 0.0) {
            pairs += weight(r, c);
          }
        }
      }
    }
  }
  return pairs;
}

}  // namespace

double attended_pairs(const AttentionMask& mask, const detail::AttentionShape& shape, const HostTensor* mask_values) {
  const double heads = static_cast<double>(shape.batch) * static_cast<double>(shape.heads_q);
  switch (mask.kind) {
    case MaskKind::none: return heads * static_cast<double>(shape.seq_q) * static_cast<double>(shape.seq_k);
    case MaskKind::causal: return heads * causal_pairs(mask, shape.seq_q, shape.seq_k);
    case MaskKind::neighborhood: return heads * neighborhood_pairs(mask, shape);
    case MaskKind::block:
      return masked_pairs(*mask_values, shape, [&](int64_t r, int64_t c) {
        const int64_t rows = std::min(mask.block_q, shape.seq_q - r * mask.block_q);
        const int64_t cols = std::min(mask.block_k, shape.seq_k - c * mask.block_k);
        return static_cast<double>(rows) * static_cast<double>(cols);
      });
    case MaskKind::element: return masked_pairs(*mask_values, shape, [](int64_t, int64_t) { return 1.0; });
  }
  return 0.0;
}

}  // namespace attnkit::cli
