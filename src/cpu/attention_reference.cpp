#include "cpu/attention_reference.hpp"

#include <cmath>
#include <limits>

#include "core/float_convert.hpp"
#include "core/neighborhood_window.hpp"
#include "core/positional_bias.hpp"

namespace attnkit::cpu::reference {
namespace {

using detail::AttentionShape;

// DESIGN §3: the key is in the query's window in every dimension, and in its dilation group.
bool in_neighborhood(const AttentionMask& mask, const AttentionShape& shape, int64_t query, int64_t key) {
  for (int d = shape.token_dims - 1; d >= 0; --d) {
    const int64_t extent = shape.tokens[d];
    const int64_t query_coordinate = query % extent;
    const int64_t key_coordinate = key % extent;
    query /= extent;
    key /= extent;
    const NeighborhoodDim& nd = mask.neighborhood[d];
    const auto window = detail::neighborhood_window_of_coordinate(query_coordinate, extent, nd.kernel_size, nd.dilation,
                                                                  nd.stride, nd.causal);
    if (key_coordinate % nd.dilation != window.group) return false;
    const int64_t key_index = key_coordinate / nd.dilation;
    if (key_index < window.indices.begin || key_index >= window.indices.end) return false;
  }
  return true;
}

// Entry [b, h, row, col] of a [B|1, H|1, rows, cols] bool mask (extent-1 dimensions broadcast).
bool mask_entry(const TensorView& view, int64_t b, int64_t h, int64_t row, int64_t col) {
  const int64_t offset = (view.extents[0] == 1 ? 0 : b * view.strides[0]) +
                         (view.extents[1] == 1 ? 0 : h * view.strides[1]) + row * view.strides[2] +
                         col * view.strides[3];
  return static_cast<const uint8_t*>(view.data)[offset] != 0;
}

bool attends(const AttentionMask& mask, const AttentionShape& shape, int64_t b, int64_t h, int64_t i, int64_t j) {
  switch (mask.kind) {
    case MaskKind::none: return true;
    case MaskKind::causal:
      return mask.causal_alignment == CausalAlignment::top_left ? j <= i : j <= i + shape.seq_k - shape.seq_q;
    case MaskKind::neighborhood: return in_neighborhood(mask, shape, i, j);
    case MaskKind::block: return mask_entry(mask.block_mask, b, h, i / mask.block_q, j / mask.block_k);
    case MaskKind::element: return mask_entry(mask.element_mask, b, h, i, j);
  }
  return false;
}

// A [B, *tokens, H, X] view read and written as doubles by (b, flat token, head, x).
struct HeadRows {
  const TensorView& view;
  detail::TokenStrides strides;
  std::array<int64_t, kMaxTokenDims> extents;

  HeadRows(const TensorView& v, int32_t token_dims, const std::array<int64_t, kMaxTokenDims>& token_extents)
      : view(v), strides(detail::token_strides(v, token_dims)), extents(token_extents) {}

  int64_t offset(int64_t b, int64_t token, int64_t head) const { return strides.offset(b, token, head, extents); }
  std::vector<double> row(int64_t b, int64_t token, int64_t head, int64_t width) const {
    std::vector<double> values(static_cast<size_t>(width));
    const int64_t base = offset(b, token, head);
    for (int64_t x = 0; x < width; ++x) values[x] = detail::load_as_double(view.data, view.dtype, base + x);
    return values;
  }
  void store(int64_t b, int64_t token, int64_t head, const std::vector<double>& values) const {
    const int64_t base = offset(b, token, head);
    for (size_t x = 0; x < values.size(); ++x) {
      detail::store_from_double(view.data, view.dtype, base + static_cast<int64_t>(x), values[x]);
    }
  }
};

// mask.rpb's value for (head, query token, key token); 0 without a bias.
struct BiasLookup {
  bool present;
  detail::PositionalBiasIndex index;
  std::vector<double> table;

  BiasLookup(const AttentionMask& mask, const AttentionShape& shape) : present(mask.rpb.defined()), index(mask, shape) {
    if (present) table = detail::load_positional_bias<double>(mask.rpb, shape.heads_q, index.entries_per_head());
  }
  int64_t slot(int64_t h, int64_t i, int64_t j) const {
    return h * index.entries_per_head() + index.entry(index.coordinates(i), index.coordinates(j));
  }
  double value(int64_t h, int64_t i, int64_t j) const { return present ? table[slot(h, i, j)] : 0.0; }
};

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t x = 0; x < a.size(); ++x) sum += a[x] * b[x];
  return sum;
}

// The scaled score of a query and a key: 0 with head dim 0 (DESIGN: every score is 0 then, whatever the
// default scale 1/sqrt(0) would say).
double scaled_score(double scale, const std::vector<double>& query, const std::vector<double>& key) {
  return query.empty() ? 0.0 : scale * dot(query, key);
}

}  // namespace

std::vector<uint8_t> explicit_attention_mask(const AttentionMask& mask, const AttentionShape& shape, int64_t b,
                                             int64_t h) {
  std::vector<uint8_t> visible(static_cast<size_t>(shape.seq_q * shape.seq_k));
  for (int64_t i = 0; i < shape.seq_q; ++i) {
    for (int64_t j = 0; j < shape.seq_k; ++j) visible[i * shape.seq_k + j] = attends(mask, shape, b, h, i, j) ? 1 : 0;
  }
  return visible;
}

void attention_forward_reference(const AttentionForward& problem, const AttentionShape& shape, const RunOptions&) {
  const HeadRows q(problem.q, shape.token_dims, shape.tokens);
  const HeadRows k(problem.k, shape.token_dims_kv, shape.tokens_kv);
  const HeadRows v(problem.v, shape.token_dims_kv, shape.tokens_kv);
  const HeadRows out(problem.out, shape.token_dims, shape.tokens);
  const auto lse_strides =
      problem.lse.defined() ? detail::token_strides(problem.lse, shape.token_dims) : detail::TokenStrides{};
  const int64_t group = shape.heads_kv > 0 ? shape.heads_q / shape.heads_kv : 1;  // no KV head: no query head
  const BiasLookup bias(problem.mask, shape);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads_q; ++h) {
      const std::vector<uint8_t> visible = explicit_attention_mask(problem.mask, shape, b, h);
      // Rows are independent (each writes its own output and LSE): threads take them in chunks.
#pragma omp parallel for schedule(dynamic, 8)
      for (int64_t i = 0; i < shape.seq_q; ++i) {
        const std::vector<double> query = q.row(b, i, h, shape.head_dim);
        std::vector<double> scores(static_cast<size_t>(shape.seq_k), -std::numeric_limits<double>::infinity());
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < shape.seq_k; ++j) {
          if (!visible[i * shape.seq_k + j]) continue;
          scores[j] = scaled_score(shape.scale, query, k.row(b, j, h / group, shape.head_dim)) + bias.value(h, i, j);
          max_score = std::max(max_score, scores[j]);
        }
        std::vector<double> o(static_cast<size_t>(shape.head_dim_v), 0.0);
        double lse = -std::numeric_limits<double>::infinity();
        if (max_score > -std::numeric_limits<double>::infinity()) {
          double sum = 0.0;
          for (int64_t j = 0; j < shape.seq_k; ++j) {
            if (!visible[i * shape.seq_k + j]) continue;
            const double p = std::exp(scores[j] - max_score);
            sum += p;
            const std::vector<double> value = v.row(b, j, h / group, shape.head_dim_v);
            for (int64_t x = 0; x < shape.head_dim_v; ++x) o[x] += p * value[x];
          }
          for (double& x : o) x /= sum;
          lse = max_score + std::log(sum);
        }
        out.store(b, i, h, o);
        if (problem.lse.defined()) {
          static_cast<float*>(problem.lse.data)[lse_strides.offset(b, i, h, shape.tokens)] = static_cast<float>(lse);
        }
      }
    }
  }
}

void attention_backward_reference(const AttentionBackward& problem, const AttentionShape& shape, const RunOptions&) {
  const HeadRows q(problem.q, shape.token_dims, shape.tokens);
  const HeadRows k(problem.k, shape.token_dims_kv, shape.tokens_kv);
  const HeadRows v(problem.v, shape.token_dims_kv, shape.tokens_kv);
  const HeadRows out(problem.out, shape.token_dims, shape.tokens);
  const HeadRows dout(problem.grad_out, shape.token_dims, shape.tokens);
  const HeadRows dq(problem.grad_q, shape.token_dims, shape.tokens);
  const HeadRows dk(problem.grad_k, shape.token_dims_kv, shape.tokens_kv);
  const HeadRows dv(problem.grad_v, shape.token_dims_kv, shape.tokens_kv);
  const auto lse_strides = detail::token_strides(problem.lse, shape.token_dims);
  const int64_t group = shape.heads_kv > 0 ? shape.heads_q / shape.heads_kv : 1;  // no KV head: no query head
  const double scale = shape.scale;
  const BiasLookup bias(problem.mask, shape);
  const bool bias_gradient = problem.grad_rpb.defined();
  // The positional bias's gradient of each task, summed over batches in order afterwards.
  std::vector<std::vector<double>> bias_grads(
      static_cast<size_t>(shape.batch * shape.heads_kv),
      std::vector<double>(bias_gradient ? static_cast<size_t>(shape.heads_q * bias.index.entries_per_head()) : 0, 0.0));
  // One task per (batch, kv head): it alone writes dK, dV of that head and dQ of its query heads.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t kv_head = 0; kv_head < shape.heads_kv; ++kv_head) {
      // dK, dV of this kv head, summed over the query heads of its group.
      std::vector<std::vector<double>> key_grads(static_cast<size_t>(shape.seq_k),
                                                 std::vector<double>(static_cast<size_t>(shape.head_dim), 0.0));
      std::vector<std::vector<double>> value_grads(static_cast<size_t>(shape.seq_k),
                                                   std::vector<double>(static_cast<size_t>(shape.head_dim_v), 0.0));
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        const std::vector<uint8_t> visible = explicit_attention_mask(problem.mask, shape, b, h);
        for (int64_t i = 0; i < shape.seq_q; ++i) {
          std::vector<double> query_grad(static_cast<size_t>(shape.head_dim), 0.0);
          const double lse = static_cast<const float*>(problem.lse.data)[lse_strides.offset(b, i, h, shape.tokens)];
          if (lse != -std::numeric_limits<double>::infinity()) {
            const std::vector<double> query = q.row(b, i, h, shape.head_dim);
            const std::vector<double> grad_out = dout.row(b, i, h, shape.head_dim_v);
            const double delta = dot(grad_out, out.row(b, i, h, shape.head_dim_v));
            for (int64_t j = 0; j < shape.seq_k; ++j) {
              if (!visible[i * shape.seq_k + j]) continue;
              const std::vector<double> key = k.row(b, j, kv_head, shape.head_dim);
              const std::vector<double> value = v.row(b, j, kv_head, shape.head_dim_v);
              const double p = std::exp(scaled_score(scale, query, key) + bias.value(h, i, j) - lse);
              const double ds = p * (dot(grad_out, value) - delta);
              if (bias_gradient) bias_grads[b * shape.heads_kv + kv_head][bias.slot(h, i, j)] += ds;
              for (int64_t x = 0; x < shape.head_dim_v; ++x) value_grads[j][x] += p * grad_out[x];
              for (int64_t x = 0; x < shape.head_dim; ++x) {
                query_grad[x] += scale * ds * key[x];
                key_grads[j][x] += scale * ds * query[x];
              }
            }
          }
          dq.store(b, i, h, query_grad);
        }
      }
      for (int64_t j = 0; j < shape.seq_k; ++j) {
        dk.store(b, j, kv_head, key_grads[j]);
        dv.store(b, j, kv_head, value_grads[j]);
      }
    }
  }
  if (bias_gradient) {
    std::vector<double> total(static_cast<size_t>(shape.heads_q * bias.index.entries_per_head()), 0.0);
    for (const auto& part : bias_grads) {
      for (size_t e = 0; e < total.size(); ++e) total[e] += part[e];
    }
    detail::store_positional_bias_gradient(problem.grad_rpb, total, bias.index.entries_per_head());
  }
}

}  // namespace attnkit::cpu::reference
