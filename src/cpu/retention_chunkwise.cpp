// Chunkwise form of retention for one (batch, head) slice. Tokens are cut into chunks of C (the
// last may be shorter, length L). Inside a chunk starting at t0 the parallel form runs on the
// chunk's own keys; everything earlier reaches it through the carried state S = S_{t0-1}:
//   o_t = scale * gamma^(t-t0+1) q_t S + sum_{t0<=m<=t} scale gamma^(t-m) (q_t . k_m) v_m,
//   S  <- gamma^L S + sum_{m in chunk} gamma^(t0+L-1-m) k_m^T v_m.
//
// Backward is two sweeps over the chunks. A forward sweep rebuilds S chunk by chunk for dq; a
// reverse sweep carries U = dLoss/dS at the chunk's end (starting from the final-state gradient):
// the chunk's keys and values get their intra-chunk terms plus gamma^(t0+L-1-m) times U's pull,
// then U <- gamma^L U + sum_{t in chunk} scale gamma^(t-t0+1) q_t^T dO_t. After the first chunk
// U is the initial state's gradient. Memory stays O(Dk*Dv + C) beyond the inputs.
#include <algorithm>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"

namespace attnkit::cpu::retention {
namespace {

template <typename Acc>
void load_initial_state(const HeadInputs<Acc>& in, std::vector<Acc>& state) {
  if (in.initial_state) {
    std::copy(in.initial_state, in.initial_state + state.size(), state.begin());
  } else {
    std::fill(state.begin(), state.end(), Acc(0));
  }
}

// S <- gamma^L S + sum_{m in [t0, t0+L)} gamma^(t0+L-1-m) k_m^T v_m
template <typename Acc>
void advance_state(const HeadInputs<Acc>& in, const std::vector<Acc>& decay, int64_t t0, int64_t length, Acc* state) {
  const int64_t dk = in.head_dim, dv = in.head_dim_v;
  scale_in_place(decay[length], state, dk * dv);
  for (int64_t m = t0; m < t0 + length; ++m) {
    add_outer(decay[t0 + length - 1 - m], in.k + m * dk, in.v + m * dv, state, dk, dv);
  }
}

}  // namespace

template <typename Acc>
void chunkwise_forward(const HeadInputs<Acc>& in, int64_t chunk_size, const HeadOutputs<Acc>& out) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const int64_t chunk = std::max<int64_t>(1, std::min(chunk_size, std::max<int64_t>(T, 1)));
  const Acc scale = static_cast<Acc>(in.scale);
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, chunk);
  std::vector<Acc> state(static_cast<std::size_t>(dk * dv));
  load_initial_state(in, state);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t length = std::min(chunk, T - t0);
    for (int64_t t = t0; t < t0 + length; ++t) {
      const Acc* q_t = in.q + t * dk;
      Acc* o_t = out.out + t * dv;
      std::fill(o_t, o_t + dv, Acc(0));
      add_row_times_matrix(scale * decay[t - t0 + 1], q_t, state.data(), o_t, dk, dv);
      for (int64_t m = t0; m <= t; ++m)
        axpy(scale * decay[t - m] * dot(q_t, in.k + m * dk, dk), in.v + m * dv, o_t, dv);
    }
    advance_state(in, decay, t0, length, state.data());
  }
  if (out.final_state) std::copy(state.begin(), state.end(), out.final_state);
}

template <typename Acc>
void chunkwise_backward(const HeadInputs<Acc>& in, int64_t chunk_size, const HeadGradients<Acc>& grad) {
  const int64_t T = in.tokens, dk = in.head_dim, dv = in.head_dim_v;
  const int64_t chunk = std::max<int64_t>(1, std::min(chunk_size, std::max<int64_t>(T, 1)));
  const Acc scale = static_cast<Acc>(in.scale);
  const std::vector<Acc> decay = decay_powers<Acc>(in.gamma, chunk);

  // Forward sweep: dq_t = scale gamma^(t-t0+1) S dO_t + sum_{t0<=m<=t} scale gamma^(t-m) (dO_t . v_m) k_m.
  std::vector<Acc> state(static_cast<std::size_t>(dk * dv));
  load_initial_state(in, state);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t length = std::min(chunk, T - t0);
    for (int64_t t = t0; t < t0 + length; ++t) {
      const Acc* do_t = grad.grad_out + t * dv;
      Acc* dq_t = grad.grad_q + t * dk;
      std::fill(dq_t, dq_t + dk, Acc(0));
      add_matrix_times_column(scale * decay[t - t0 + 1], state.data(), do_t, dq_t, dk, dv);
      for (int64_t m = t0; m <= t; ++m)
        axpy(scale * decay[t - m] * dot(do_t, in.v + m * dv, dv), in.k + m * dk, dq_t, dk);
    }
    advance_state(in, decay, t0, length, state.data());
  }

  // Reverse sweep over chunks with U = dLoss/dS at the end of the current chunk.
  std::vector<Acc>& carried = state;
  if (grad.grad_final_state) {
    std::copy(grad.grad_final_state, grad.grad_final_state + dk * dv, carried.begin());
  } else {
    std::fill(carried.begin(), carried.end(), Acc(0));
  }
  const int64_t chunks = T == 0 ? 0 : (T + chunk - 1) / chunk;
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * chunk;
    const int64_t end = std::min(t0 + chunk, T);
    const int64_t length = end - t0;
    for (int64_t m = t0; m < end; ++m) {
      const Acc* k_m = in.k + m * dk;
      const Acc* v_m = in.v + m * dv;
      Acc* dk_m = grad.grad_k + m * dk;
      Acc* dv_m = grad.grad_v + m * dv;
      std::fill(dk_m, dk_m + dk, Acc(0));
      std::fill(dv_m, dv_m + dv, Acc(0));
      const Acc carry_decay = decay[end - 1 - m];
      add_matrix_times_column(carry_decay, carried.data(), v_m, dk_m, dk, dv);
      add_row_times_matrix(carry_decay, k_m, carried.data(), dv_m, dk, dv);
      for (int64_t t = m; t < end; ++t) {
        const Acc weight = scale * decay[t - m];
        const Acc* q_t = in.q + t * dk;
        const Acc* do_t = grad.grad_out + t * dv;
        axpy(weight * dot(do_t, v_m, dv), q_t, dk_m, dk);
        axpy(weight * dot(q_t, k_m, dk), do_t, dv_m, dv);
      }
    }
    scale_in_place(decay[length], carried.data(), dk * dv);
    for (int64_t t = t0; t < end; ++t) {
      add_outer(scale * decay[t - t0 + 1], in.q + t * dk, grad.grad_out + t * dv, carried.data(), dk, dv);
    }
  }
  if (grad.grad_initial_state) std::copy(carried.begin(), carried.end(), grad.grad_initial_state);
}

template void chunkwise_forward<float>(const HeadInputs<float>&, int64_t, const HeadOutputs<float>&);
template void chunkwise_forward<double>(const HeadInputs<double>&, int64_t, const HeadOutputs<double>&);
template void chunkwise_backward<float>(const HeadInputs<float>&, int64_t, const HeadGradients<float>&);
template void chunkwise_backward<double>(const HeadInputs<double>&, int64_t, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
