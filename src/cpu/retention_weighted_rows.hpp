// The weighted-row parallel retention shared by the decay-matrix form (retention_decay_matrix.cpp) and RetNet's
// normalised form (retention_normalized.cpp), for one (batch, head) slice. A form says, per query row t, which
// keys count and with what weight (a WeightRow: keys [0, keys), weights w[m], a row factor f); then
//   s[t, m] = f * w[m] * (q_t . k_m)
//   a_t = sum_m |s[t, m]|,  n_t = max(a_t, 1) with normalize (RetNet's score normalisation), else 1
//   o_t = sum_m (s[t, m] / n_t) v_m
// Rows are built on the fly; nothing of size Tq x Tk is stored.
//
// Backward treats the weights as constants and differentiates the denominator n_t as an ordinary function of the
// scores (RetNet's code detaches it; we differentiate it so the gradient is the true gradient of the forward):
//   dp[t, m] = dO_t . v_m,  dv_m += (s[t, m] / n_t) dO_t,
//   ds[t, m] = dp[t, m] / n_t - [normalize and a_t > 1] sign(s[t, m]) (sum_j dp[t, j] s[t, j]) / n_t^2,
// with sign(0) = 0; at a_t == 1 exactly the clamp's derivative is taken as 0. Then
//   dq_t += ds * f * w[m] k_m,  dk_m += ds * f * w[m] q_t.
//
// kZeroWeightsMask: a weight of exactly 0 means the key does not count for that query (the decay matrix's
// contract): its score is 0 without the dot product, zero scores are not accumulated into o_t and zero weights not
// into dq / dk, so such keys leave the outputs (and the gradients, as far as k goes) untouched even where their k
// or v is not finite. Without it every pair in the row is multiplied through. Where no product overflows, both
// give the same bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {

// Query row t's keys and weights: s[t, m] = factor * weights[m] * (q_t . k_m) for m < keys.
template <typename Acc>
struct WeightRow {
  const Acc* weights = nullptr;
  int64_t keys = 0;
  Acc factor = 0;  // the scale times any per-row normalisation of the weights
};

// The per-row passes. Each is its own (not inlined) function over plain pointers, so that the few values its
// loops need stay in registers: inlined into one body with the row loop, the compiler spilled loop bounds
// inside the innermost axpy loops.
namespace weighted_rows_detail {

// Fills s[0..row.keys) for the query q_t and returns a_t = sum |s|.
template <bool kZeroWeightsMask, typename Acc>
[[gnu::noinline]] Acc score_row(const Acc* q_t, const Acc* k, int64_t dk, WeightRow<Acc> row, Acc* s) {
  const Acc* const w = row.weights;
  const Acc factor = row.factor;
  Acc abs_sum = 0;
  for (int64_t m = 0; m < row.keys; ++m) {
    if (kZeroWeightsMask && w[m] == Acc(0)) {
      s[m] = Acc(0);
    } else {
      s[m] = factor * w[m] * dot(q_t, k + m * dk, dk);
    }
    abs_sum += std::abs(s[m]);
  }
  return abs_sum;
}

// o_t = sum_m s[m] * inv_denominator * v_m.
template <bool kZeroWeightsMask, typename Acc>
[[gnu::noinline]] void output_row(const Acc* s, int64_t keys, Acc inv_denominator, const Acc* v, int64_t dv, Acc* o_t) {
  std::fill(o_t, o_t + dv, Acc(0));
  for (int64_t m = 0; m < keys; ++m) {
    if (kZeroWeightsMask && s[m] == Acc(0)) continue;
    axpy(s[m] * inv_denominator, v + m * dv, o_t, dv);
  }
}

// dp[m] = dO_t . v_m and dv_m += (s[m] / denominator) dO_t; returns sum_m dp[m] s[m].
template <typename Acc>
[[gnu::noinline]] Acc value_grad_row(const Acc* s, int64_t keys, Acc denominator, const Acc* do_t, const Acc* v,
                                     int64_t dv, Acc* dp, Acc* grad_v) {
  Acc pull = 0;
  for (int64_t m = 0; m < keys; ++m) {
    dp[m] = dot(do_t, v + m * dv, dv);
    pull += dp[m] * s[m];
    axpy(s[m] / denominator, do_t, grad_v + m * dv, dv);
  }
  return pull;
}

// ds[m] = dp[m] / denominator - sign(s[m]) pull_scaled; dq_t += ds f w[m] k_m, dk_m += ds f w[m] q_t.
template <bool kZeroWeightsMask, typename Acc>
[[gnu::noinline]] void query_key_grad_row(const Acc* s, const Acc* dp, WeightRow<Acc> row, Acc denominator,
                                          Acc pull_scaled, const Acc* q_t, const Acc* k, int64_t dk, Acc* dq_t,
                                          Acc* grad_k) {
  const Acc* const w = row.weights;
  const Acc factor = row.factor;
  for (int64_t m = 0; m < row.keys; ++m) {
    if (kZeroWeightsMask && w[m] == Acc(0)) continue;
    const Acc sign = static_cast<Acc>((s[m] > 0) - (s[m] < 0));
    const Acc ds = dp[m] / denominator - sign * pull_scaled;
    const Acc dqk = ds * factor * w[m];  // gradient of the raw dot product q_t . k_m
    axpy(dqk, k + m * dk, dq_t, dk);
    axpy(dqk, q_t, grad_k + m * dk, dk);
  }
}

template <typename Acc>
Acc row_denominator(bool normalize, Acc abs_sum) {
  return normalize ? std::max(abs_sum, Acc(1)) : Acc(1);
}

}  // namespace weighted_rows_detail

// o (in.tokens x Dv) from rows(t) -> WeightRow<Acc>; key_tokens (>= every row's keys) sizes the score scratch.
template <bool kZeroWeightsMask, typename Acc, typename Rows>
void weighted_rows_forward(const HeadInputs<Acc>& in, int64_t key_tokens, bool normalize, const Rows& rows,
                           const HeadOutputs<Acc>& out) {
  using namespace weighted_rows_detail;
  const int64_t dk = in.head_dim, dv = in.head_dim_v;
  std::vector<Acc> scores(static_cast<std::size_t>(key_tokens));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const WeightRow<Acc> row = rows(t);
    const Acc abs_sum = score_row<kZeroWeightsMask>(in.q + t * dk, in.k, dk, row, scores.data());
    const Acc inv_denominator = Acc(1) / row_denominator(normalize, abs_sum);
    output_row<kZeroWeightsMask>(scores.data(), row.keys, inv_denominator, in.v, dv, out.out + t * dv);
  }
}

// grad_q (in.tokens x Dk), grad_k (key_tokens x Dk) and grad_v (key_tokens x Dv), all written.
template <bool kZeroWeightsMask, typename Acc, typename Rows>
void weighted_rows_backward(const HeadInputs<Acc>& in, int64_t key_tokens, bool normalize, const Rows& rows,
                            const HeadGradients<Acc>& grad) {
  using namespace weighted_rows_detail;
  const int64_t dk = in.head_dim, dv = in.head_dim_v;
  std::vector<Acc> scores(static_cast<std::size_t>(key_tokens));
  std::vector<Acc> score_grads(static_cast<std::size_t>(key_tokens));
  std::fill(grad.grad_q, grad.grad_q + in.tokens * dk, Acc(0));
  std::fill(grad.grad_k, grad.grad_k + key_tokens * dk, Acc(0));
  std::fill(grad.grad_v, grad.grad_v + key_tokens * dv, Acc(0));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const WeightRow<Acc> row = rows(t);
    const Acc* const q_t = in.q + t * dk;
    const Acc abs_sum = score_row<kZeroWeightsMask>(q_t, in.k, dk, row, scores.data());
    const Acc denominator = row_denominator(normalize, abs_sum);
    const Acc pull = value_grad_row(scores.data(), row.keys, denominator, grad.grad_out + t * dv, in.v, dv,
                                    score_grads.data(), grad.grad_v);  // sum_j dp[t, j] s[t, j]
    const Acc clamp_active = normalize && abs_sum > Acc(1) ? Acc(1) : Acc(0);
    const Acc pull_scaled = clamp_active * pull / (denominator * denominator);
    query_key_grad_row<kZeroWeightsMask>(scores.data(), score_grads.data(), row, denominator, pull_scaled, q_t, in.k,
                                         dk, grad.grad_q + t * dk, grad.grad_k);
  }
}

}  // namespace attnkit::cpu::retention
