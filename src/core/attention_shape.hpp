// The extents of a validated attention problem, read once from its views so that backends do not
// re-derive them. Produced by describe_attention() after validation has passed.
#pragma once
#include <array>
#include <cstdint>

#include "attnkit/attention.hpp"

namespace attnkit::detail {

struct AttentionShape {
  int64_t batch = 0;
  int32_t token_dims = 0;                       // rank of *tokens (Q)
  int32_t token_dims_kv = 0;                    // rank of *tokens_kv
  std::array<int64_t, kMaxTokenDims> tokens{};  // Q token extents (unused dims = 1)
  std::array<int64_t, kMaxTokenDims> tokens_kv{};
  int64_t seq_q = 0;  // product of tokens
  int64_t seq_k = 0;  // product of tokens_kv
  int64_t heads_q = 0;
  int64_t heads_kv = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;
  double scale = 0.0;  // resolved: problem.scale or 1/sqrt(head_dim)
};

// Assumes the views already passed validation.
AttentionShape describe_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const std::optional<double>& scale);

// Strides of a [B, *tokens, H, X] view for flat token indexing: stride of batch, of head, and per
// token dimension.
struct TokenStrides {
  int64_t batch = 0;
  int64_t head = 0;
  std::array<int64_t, kMaxTokenDims> token{};
  int32_t token_dims = 0;
  // Element offset of (b, flat token t, h) given the token extents.
  int64_t offset(int64_t b, int64_t t, int64_t h, const std::array<int64_t, kMaxTokenDims>& extents) const {
    int64_t off = b * batch + h * head;
    for (int d = token_dims - 1; d >= 0; --d) {
      off += (t % extents[d]) * token[d];
      t /= extents[d];
    }
    return off;
  }
};

// For [B, *tokens, H, X] and for LSE [B, *tokens, H]: batch = dim 0, tokens = dims 1..token_dims,
// head = dim token_dims + 1.
TokenStrides token_strides(const TensorView& view, int32_t token_dims);

}  // namespace attnkit::detail
