// The parallel form of retention over an explicit decay matrix, for one (batch, head) slice:
//   s[t, m] = scale * D[t, m] * (q_t . k_m)              for every key m < Tk (D decides which count)
//   a_t = sum_m |s[t, m]|,  n_t = max(a_t, 1) with normalize (RetNet's score normalisation), else 1
//   o_t = sum_m (s[t, m] / n_t) v_m
// D is used as given: RetNet's decay-row scaling (rows divided by sqrt of their sum) belongs to the matrix
// the caller builds. Rows are built on the fly; nothing of size Tq x Tk is stored besides D itself.
//
// Backward (D is a constant; the normaliser is differentiated as in retention_normalized.cpp):
//   dp[t, m] = dO_t . v_m,  dv_m += (s[t, m] / n_t) dO_t,
//   ds[t, m] = dp[t, m] / n_t - [normalize and a_t > 1] sign(s[t, m]) (sum_j dp[t, j] s[t, j]) / n_t^2,
//   dq_t += ds * scale * D[t, m] k_m,  dk_m += ds * scale * D[t, m] q_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {
namespace {

// Fills s[0..Tk) for row t and returns a_t = sum |s|.
template <typename Acc>
Acc decay_score_row(const HeadInputs<Acc>& in, int64_t t, Acc* s) {
  const int64_t dk = in.head_dim;
  const Acc scale = static_cast<Acc>(in.scale);
  const Acc* q_t = in.q + t * dk;
  const Acc* d_t = in.decay + t * in.tokens_k;
  Acc abs_sum = 0;
  for (int64_t m = 0; m < in.tokens_k; ++m) {
    s[m] = d_t[m] == Acc(0) ? Acc(0) : scale * d_t[m] * dot(q_t, in.k + m * dk, dk);
    abs_sum += std::abs(s[m]);
  }
  return abs_sum;
}

template <typename Acc>
Acc row_denominator(bool normalize, Acc abs_sum) {
  return normalize ? std::max(abs_sum, Acc(1)) : Acc(1);
}

}  // namespace

template <typename Acc>
void decay_matrix_forward(const HeadInputs<Acc>& in, bool normalize, const HeadOutputs<Acc>& out) {
  const int64_t dv = in.head_dim_v;
  std::vector<Acc> scores(static_cast<std::size_t>(in.tokens_k));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const Acc inv_denominator = Acc(1) / row_denominator(normalize, decay_score_row(in, t, scores.data()));
    Acc* o_t = out.out + t * dv;
    std::fill(o_t, o_t + dv, Acc(0));
    for (int64_t m = 0; m < in.tokens_k; ++m) {
      if (scores[m] != Acc(0)) axpy(scores[m] * inv_denominator, in.v + m * dv, o_t, dv);
    }
  }
}

template <typename Acc>
void decay_matrix_backward(const HeadInputs<Acc>& in, bool normalize, const HeadGradients<Acc>& grad) {
  const int64_t Tk = in.tokens_k, dk = in.head_dim, dv = in.head_dim_v;
  const Acc scale = static_cast<Acc>(in.scale);
  std::vector<Acc> scores(static_cast<std::size_t>(Tk));
  std::vector<Acc> score_grads(static_cast<std::size_t>(Tk));
  std::fill(grad.grad_q, grad.grad_q + in.tokens * dk, Acc(0));
  std::fill(grad.grad_k, grad.grad_k + Tk * dk, Acc(0));
  std::fill(grad.grad_v, grad.grad_v + Tk * dv, Acc(0));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const Acc abs_sum = decay_score_row(in, t, scores.data());
    const Acc denominator = row_denominator(normalize, abs_sum);
    const Acc* q_t = in.q + t * dk;
    const Acc* do_t = grad.grad_out + t * dv;
    const Acc* d_t = in.decay + t * Tk;
    Acc pull = 0;  // sum_j dp[t, j] s[t, j]
    for (int64_t m = 0; m < Tk; ++m) {
      score_grads[m] = dot(do_t, in.v + m * dv, dv);
      pull += score_grads[m] * scores[m];
      axpy(scores[m] / denominator, do_t, grad.grad_v + m * dv, dv);
    }
    const Acc clamp_active = normalize && abs_sum > Acc(1) ? Acc(1) : Acc(0);
    const Acc pull_scaled = clamp_active * pull / (denominator * denominator);
    Acc* dq_t = grad.grad_q + t * dk;
    for (int64_t m = 0; m < Tk; ++m) {
      if (d_t[m] == Acc(0)) continue;
      const Acc sign = static_cast<Acc>((scores[m] > 0) - (scores[m] < 0));
      const Acc ds = score_grads[m] / denominator - sign * pull_scaled;
      const Acc dqk = ds * scale * d_t[m];  // gradient of the raw dot product q_t . k_m
      axpy(dqk, in.k + m * dk, dq_t, dk);
      axpy(dqk, q_t, grad.grad_k + m * dk, dk);
    }
  }
}

template void decay_matrix_forward<float>(const HeadInputs<float>&, bool, const HeadOutputs<float>&);
template void decay_matrix_forward<double>(const HeadInputs<double>&, bool, const HeadOutputs<double>&);
template void decay_matrix_backward<float>(const HeadInputs<float>&, bool, const HeadGradients<float>&);
template void decay_matrix_backward<double>(const HeadInputs<double>&, bool, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
