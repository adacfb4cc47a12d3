// RetNet's normalised parallel retention for one (batch, head) slice (option `normalize`).
//   D[t, m] = gamma^(t-m) / sqrt(r_t),  r_t = sum_{j<=t} gamma^j   (m <= t; each decay row scaled)
//   s[t, m] = scale * (q_t . k_m) * D[t, m]
//   a_t = sum_m |s[t, m]|,  n_t = max(a_t, 1),  o_t = sum_m (s[t, m] / n_t) v_m
// Rows are built on the fly as in the plain parallel form. There is no state in or out.
//
// Backward treats the denominator n_t as an ordinary function of the scores (RetNet's code
// detaches it; we differentiate it so the gradient is the true gradient of the forward):
//   ds[t, m] = dp[t, m] / n_t - [a_t > 1] sign(s[t, m]) (sum_j dp[t, j] s[t, j]) / n_t^2,
// with dp[t, m] = dO_t . v_m and sign(0) = 0; at a_t == 1 exactly the clamp's derivative is
// taken as 0. Then dq_t += ds * scale * D * k_m and dk_m += ds * scale * D * q_t.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {
namespace {

// 1 / sqrt(r_t) per row; r_t = 1 + gamma * r_{t-1} summed in double.
template <typename Acc>
std::vector<Acc> inverse_sqrt_row_sums(double gamma, int64_t tokens) {
  std::vector<Acc> result(static_cast<std::size_t>(tokens));
  double row_sum = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    row_sum = 1.0 + gamma * row_sum;
    result[t] = static_cast<Acc>(1.0 / std::sqrt(row_sum));
  }
  return result;
}

template <typename Acc>
Acc sign_of(Acc x) {
  return static_cast<Acc>((x > 0) - (x < 0));
}

// Fills s[0..t] for row t and returns a_t = sum |s|.
template <typename Acc>
Acc score_row(const HeadInputs<Acc>& in, const std::vector<Acc>& decay, Acc row_factor, int64_t t, Acc* s) {
  const int64_t dk = in.head_dim;
  const Acc* q_t = in.q + t * dk;
  Acc abs_sum = 0;
  for (int64_t m = 0; m <= t; ++m) {
    s[m] = row_factor * decay[t - m] * dot(q_t, in.k + m * dk, dk);
    abs_sum += std::abs(s[m]);
  }
  return abs_sum;
}

}  // namespace

template <typename Acc>
void normalized_parallel_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out) {
  const int64_t T = in.tokens, dv = in.head_dim_v;
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, T);
  const std::vector<Acc> row_norm = inverse_sqrt_row_sums<Acc>(in.gamma, T);
  std::vector<Acc> scores(static_cast<std::size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const Acc abs_sum = score_row(in, decay, static_cast<Acc>(in.scale) * row_norm[t], t, scores.data());
    const Acc inv_denominator = Acc(1) / std::max(abs_sum, Acc(1));
    Acc* o_t = out.out + t * dv;
    std::fill(o_t, o_t + dv, Acc(0));
    for (int64_t m = 0; m <= t; ++m) axpy(scores[m] * inv_denominator, in.v + m * dv, o_t, dv);
  }
}

template <typename Acc>
void normalized_parallel_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, T);
  const std::vector<Acc> row_norm = inverse_sqrt_row_sums<Acc>(in.gamma, T);
  std::vector<Acc> scores(static_cast<std::size_t>(T));
  std::vector<Acc> score_grads(static_cast<std::size_t>(T));
  std::fill(grad.grad_q, grad.grad_q + T * dk, Acc(0));
  std::fill(grad.grad_k, grad.grad_k + T * dk, Acc(0));
  std::fill(grad.grad_v, grad.grad_v + T * dv, Acc(0));
  for (int64_t t = 0; t < T; ++t) {
    const Acc row_factor = static_cast<Acc>(in.scale) * row_norm[t];
    const Acc abs_sum = score_row(in, decay, row_factor, t, scores.data());
    const Acc denominator = std::max(abs_sum, Acc(1));
    const Acc* q_t = in.q + t * dk;
    const Acc* do_t = grad.grad_out + t * dv;
    Acc pull = 0;  // sum_j dp[t, j] s[t, j]
    for (int64_t m = 0; m <= t; ++m) {
      score_grads[m] = dot(do_t, in.v + m * dv, dv);
      pull += score_grads[m] * scores[m];
      axpy(scores[m] / denominator, do_t, grad.grad_v + m * dv, dv);
    }
    const Acc clamp_active = abs_sum > Acc(1) ? Acc(1) : Acc(0);
    const Acc pull_scaled = clamp_active * pull / (denominator * denominator);
    Acc* dq_t = grad.grad_q + t * dk;
    for (int64_t m = 0; m <= t; ++m) {
      const Acc ds = score_grads[m] / denominator - sign_of(scores[m]) * pull_scaled;
      const Acc dqk = ds * row_factor * decay[t - m];  // gradient of the raw dot product q_t . k_m
      axpy(dqk, in.k + m * dk, dq_t, dk);
      axpy(dqk, q_t, grad.grad_k + m * dk, dk);
    }
  }
  if (grad.grad_initial_state) std::fill(grad.grad_initial_state, grad.grad_initial_state + dk * dv, Acc(0));
}

template void normalized_parallel_forward<float>(const HeadInputs<float>&, const HeadOutputs<float>&);
template void normalized_parallel_forward<double>(const HeadInputs<double>&, const HeadOutputs<double>&);
template void normalized_parallel_backward<float>(const HeadInputs<float>&, const HeadGradients<float>&);
template void normalized_parallel_backward<double>(const HeadInputs<double>&, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
