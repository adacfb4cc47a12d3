#include "core/attention_shape.hpp"

#include <cmath>

namespace attnkit::detail {

TokenStrides token_strides(const TensorView& view, int32_t token_dims) {
  TokenStrides s;
  s.batch = view.strides[0];
  s.token_dims = token_dims;
  for (int d = 0; d < token_dims; ++d) s.token[d] = view.strides[1 + d];
  s.head = view.strides[token_dims + 1];
  return s;
}

AttentionShape describe_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const std::optional<double>& scale) {
  AttentionShape s;
  s.batch = q.extents[0];
  s.token_dims = q.rank - 3;
  s.token_dims_kv = k.rank - 3;
  s.tokens.fill(1);
  s.tokens_kv.fill(1);
  s.seq_q = 1;
  s.seq_k = 1;
  for (int d = 0; d < s.token_dims; ++d) {
    s.tokens[d] = q.extents[1 + d];
    s.seq_q *= s.tokens[d];
  }
  for (int d = 0; d < s.token_dims_kv; ++d) {
    s.tokens_kv[d] = k.extents[1 + d];
    s.seq_k *= s.tokens_kv[d];
  }
  s.heads_q = q.extents[q.rank - 2];
  s.heads_kv = k.extents[k.rank - 2];
  s.head_dim = q.extents[q.rank - 1];
  s.head_dim_v = v.extents[v.rank - 1];
  // With head_dim 0 every score is 0 whatever the scale: 1 keeps it finite (1/sqrt(0) would make 0 * inf).
  s.scale = scale.value_or(s.head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(s.head_dim)) : 1.0);
  return s;
}

}  // namespace attnkit::detail
