// Recurrent form of retention for one (batch, head) slice: one token at a time,
// S_t = gamma S_{t-1} + k_t^T v_t and o_t = scale * q_t S_t. This is the decode path (T = 1 with a
// carried state) and the most literal statement of the recurrence.
//
// Backward: a forward sweep rebuilds S_t for dq_t = scale * S_t dO_t; a reverse sweep carries
// U = dLoss/dS_t, starting from the final-state gradient: U += scale q_t^T dO_t, then
// dk_t = U v_t, dv_t = k_t U, and U <- gamma U hands the gradient to S_{t-1}. What is left after
// token 0 is the initial state's gradient.
#include <algorithm>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {
namespace {

template <typename Acc>
void start_state(const HeadInputs<Acc>& in, std::vector<Acc>& state) {
  if (in.initial_state) {
    std::copy(in.initial_state, in.initial_state + state.size(), state.begin());
  } else {
    std::fill(state.begin(), state.end(), Acc(0));
  }
}

// S <- gamma S + k_t^T v_t
template <typename Acc>
void step_state(const HeadInputs<Acc>& in, Acc gamma, int64_t t, Acc* state) {
  const int64_t dk = in.head_dim, dv = in.head_dim_v;
  scale_in_place(gamma, state, dk * dv);
  add_outer(Acc(1), in.k + t * dk, in.v + t * dv, state, dk, dv);
}

}  // namespace

template <typename Acc>
void recurrent_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const Acc scale = static_cast<Acc>(in.scale);
  const Acc gamma = static_cast<Acc>(in.gamma);
  std::vector<Acc> state(static_cast<std::size_t>(dk * dv));
  start_state(in, state);
  for (int64_t t = 0; t < T; ++t) {
    step_state(in, gamma, t, state.data());
    Acc* o_t = out.out + t * dv;
    std::fill(o_t, o_t + dv, Acc(0));
    add_row_times_matrix(scale, in.q + t * dk, state.data(), o_t, dk, dv);
  }
  if (out.final_state) std::copy(state.begin(), state.end(), out.final_state);
}

template <typename Acc>
void recurrent_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const Acc scale = static_cast<Acc>(in.scale);
  const Acc gamma = static_cast<Acc>(in.gamma);
  std::vector<Acc> state(static_cast<std::size_t>(dk * dv));
  start_state(in, state);
  for (int64_t t = 0; t < T; ++t) {
    step_state(in, gamma, t, state.data());
    Acc* dq_t = grad.grad_q + t * dk;
    std::fill(dq_t, dq_t + dk, Acc(0));
    add_matrix_times_column(scale, state.data(), grad.grad_out + t * dv, dq_t, dk, dv);
  }

  std::vector<Acc>& carried = state;  // dLoss/dS_t
  if (grad.grad_final_state) {
    std::copy(grad.grad_final_state, grad.grad_final_state + dk * dv, carried.begin());
  } else {
    std::fill(carried.begin(), carried.end(), Acc(0));
  }
  for (int64_t t = T - 1; t >= 0; --t) {
    add_outer(scale, in.q + t * dk, grad.grad_out + t * dv, carried.data(), dk, dv);
    Acc* dk_t = grad.grad_k + t * dk;
    Acc* dv_t = grad.grad_v + t * dv;
    std::fill(dk_t, dk_t + dk, Acc(0));
    std::fill(dv_t, dv_t + dv, Acc(0));
    add_matrix_times_column(Acc(1), carried.data(), in.v + t * dv, dk_t, dk, dv);
    add_row_times_matrix(Acc(1), in.k + t * dk, carried.data(), dv_t, dk, dv);
    scale_in_place(gamma, carried.data(), dk * dv);
  }
  if (grad.grad_initial_state) std::copy(carried.begin(), carried.end(), grad.grad_initial_state);
}

template void recurrent_forward<float>(const HeadInputs<float>&, const HeadOutputs<float>&);
template void recurrent_forward<double>(const HeadInputs<double>&, const HeadOutputs<double>&);
template void recurrent_backward<float>(const HeadInputs<float>&, const HeadGradients<float>&);
template void recurrent_backward<double>(const HeadInputs<double>&, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
