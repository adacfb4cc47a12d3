// Relative positional bias of neighborhood attention (AttentionMask::rpb, NATTEN <= 0.17 semantics).
//
// rpb is [Hq, 2*K_0-1, ..., 2*K_{n-1}-1]. The score of query token i and key token j of head h gets
// rpb[h, e_0, ..., e_{n-1}] with e_d = (j_d - i_d) / dilation_d + K_d - 1, j_d and i_d the tokens'
// coordinates: the key's offset from the query in dilated steps, shifted to be non-negative. Inside a
// window (stride 1, no causal dimension, which validation requires with rpb) the offset is a multiple
// of the dilation and lies in [-(K_d-1), K_d-1]. NATTEN indexes the same entry as "pb_start + ki"
// (the window's start position in the bias table plus the key's place in the window), which equals e_d.
//
// Backends read the table once per call into a dense [Hq][entries] array (PositionalBiasTable) and
// look entries up by PositionalBiasIndex; the backward sums score gradients into such an array and
// writes it to grad_rpb (store_positional_bias_gradient).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::detail {

class PositionalBiasIndex {
 public:
  // An index of one entry per head when mask.rpb is not given.
  PositionalBiasIndex(const AttentionMask& mask, const AttentionShape& shape);

  int64_t entries_per_head() const { return entries_; }
  // Coordinates of a flat (row-major) token index.
  std::array<int64_t, kMaxTokenDims> coordinates(int64_t token) const {
    std::array<int64_t, kMaxTokenDims> c{};
    for (int d = dims_ - 1; d >= 0; --d) {
      c[d] = token % extents_[d];
      token /= extents_[d];
    }
    return c;
  }
  // Entry of a (query, key) pair within one head's table; the key must be in the query's window.
  int64_t entry(const std::array<int64_t, kMaxTokenDims>& query, const std::array<int64_t, kMaxTokenDims>& key) const {
    int64_t e = 0;
    for (int d = 0; d < dims_; ++d) e += ((key[d] - query[d]) / dilation_[d] + kernel_[d] - 1) * table_strides_[d];
    return e;
  }

 private:
  int dims_ = 0;
  int64_t entries_ = 1;
  std::array<int64_t, kMaxTokenDims> extents_{1, 1, 1};
  std::array<int64_t, kMaxTokenDims> kernel_{1, 1, 1};
  std::array<int64_t, kMaxTokenDims> dilation_{1, 1, 1};
  std::array<int64_t, kMaxTokenDims> table_strides_{};
};

// mask.rpb read into a dense [Hq][entries_per_head] array of T (any strides, any floating dtype).
template <class T>
std::vector<T> load_positional_bias(const TensorView& rpb, int64_t heads, int64_t entries_per_head);

// values ([Hq][entries_per_head]) written to grad_rpb through its dtype and strides.
void store_positional_bias_gradient(const TensorView& grad_rpb, const std::vector<double>& values,
                                    int64_t entries_per_head);

}  // namespace attnkit::detail
