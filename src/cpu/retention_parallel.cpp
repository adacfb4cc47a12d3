// Parallel (quadratic) form of retention for one (batch, head) slice. Row t of the score matrix is
// built on the fly, P[t, m] = scale * gamma^(t-m) * (q_t . k_m) for m <= t, and immediately applied
// to V, so nothing of size T x T is stored. The initial state enters as
// scale * gamma^(t+1) * q_t S_{-1}; the final state is gamma^T S_{-1} + sum_m gamma^(T-1-m) k_m^T v_m.
//
// Backward differentiates exactly that expression: with dP[t, m] = dO_t . v_m,
//   dq_t = sum_{m<=t} scale gamma^(t-m) dP[t, m] k_m + scale gamma^(t+1) S_{-1} dO_t,
//   dk_m = sum_{t>=m} scale gamma^(t-m) dP[t, m] q_t + gamma^(T-1-m) G v_m,
//   dv_m = sum_{t>=m} P[t, m] dO_t + gamma^(T-1-m) k_m G,
//   dS_{-1} = gamma^T G + sum_t scale gamma^(t+1) q_t^T dO_t,
// where G is the incoming gradient of the final state.
#include <algorithm>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {

template <typename Acc>
void parallel_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const Acc scale = static_cast<Acc>(in.scale);
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, T);
  std::vector<Acc> scores(static_cast<std::size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const Acc* q_t = in.q + t * dk;
    Acc* o_t = out.out + t * dv;
    std::fill(o_t, o_t + dv, Acc(0));
    for (int64_t m = 0; m <= t; ++m) scores[m] = scale * decay[t - m] * dot(q_t, in.k + m * dk, dk);
    for (int64_t m = 0; m <= t; ++m) axpy(scores[m], in.v + m * dv, o_t, dv);
    if (in.initial_state) add_row_times_matrix(scale * decay[t + 1], q_t, in.initial_state, o_t, dk, dv);
  }
  if (out.final_state) {
    Acc* state = out.final_state;
    std::fill(state, state + dk * dv, Acc(0));
    if (in.initial_state) axpy(decay[T], in.initial_state, state, dk * dv);
    for (int64_t m = 0; m < T; ++m) add_outer(decay[T - 1 - m], in.k + m * dk, in.v + m * dv, state, dk, dv);
  }
}

template <typename Acc>
void parallel_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const Acc scale = static_cast<Acc>(in.scale);
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, T);
  std::fill(grad.grad_q, grad.grad_q + T * dk, Acc(0));
  std::fill(grad.grad_k, grad.grad_k + T * dk, Acc(0));
  std::fill(grad.grad_v, grad.grad_v + T * dv, Acc(0));
  for (int64_t t = 0; t < T; ++t) {
    const Acc* q_t = in.q + t * dk;
    const Acc* do_t = grad.grad_out + t * dv;
    Acc* dq_t = grad.grad_q + t * dk;
    for (int64_t m = 0; m <= t; ++m) {
      const Acc* k_m = in.k + m * dk;
      const Acc* v_m = in.v + m * dv;
      const Acc weight = scale * decay[t - m];
      const Acc p = weight * dot(q_t, k_m, dk);
      const Acc ds = weight * dot(do_t, v_m, dv);
      axpy(p, do_t, grad.grad_v + m * dv, dv);
      axpy(ds, k_m, dq_t, dk);
      axpy(ds, q_t, grad.grad_k + m * dk, dk);
    }
    if (in.initial_state) add_matrix_times_column(scale * decay[t + 1], in.initial_state, do_t, dq_t, dk, dv);
  }
  if (grad.grad_final_state) {
    for (int64_t m = 0; m < T; ++m) {
      add_matrix_times_column(decay[T - 1 - m], grad.grad_final_state, in.v + m * dv, grad.grad_k + m * dk, dk, dv);
      add_row_times_matrix(decay[T - 1 - m], in.k + m * dk, grad.grad_final_state, grad.grad_v + m * dv, dk, dv);
    }
  }
  if (grad.grad_initial_state) {
    Acc* d_state = grad.grad_initial_state;
    std::fill(d_state, d_state + dk * dv, Acc(0));
    if (grad.grad_final_state) axpy(decay[T], grad.grad_final_state, d_state, dk * dv);
    for (int64_t t = 0; t < T; ++t)
      add_outer(scale * decay[t + 1], in.q + t * dk, grad.grad_out + t * dv, d_state, dk, dv);
  }
}

template void parallel_forward<float>(const HeadInputs<float>&, const HeadOutputs<float>&);
template void parallel_forward<double>(const HeadInputs<double>&, const HeadOutputs<double>&);
template void parallel_backward<float>(const HeadInputs<float>&, const HeadGradients<float>&);
template void parallel_backward<double>(const HeadInputs<double>&, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
