// One (batch, head) slice of a retention problem, gathered into dense row-major buffers of the
// accumulation type (float, or double for f64 inputs). Every retention form is written against
// these slices, so the forms never see dtypes or strides; retention_dispatch.cpp gathers, threads
// over (batch, head) and scatters.
#pragma once
#include <cstdint>

namespace attnkit::cpu::retention {

template <typename Acc>
struct HeadInputs {
  int64_t tokens = 0;      // T (query tokens)
  int64_t tokens_k = 0;    // Tk: key tokens, equal to T except with a decay matrix
  int64_t head_dim = 0;    // Dk
  int64_t head_dim_v = 0;  // Dv
  double gamma = 0.0;      // this head's decay
  double scale = 0.0;
  const Acc* q = nullptr;              // [T, Dk]
  const Acc* k = nullptr;              // [Tk, Dk]
  const Acc* v = nullptr;              // [Tk, Dv]
  const Acc* initial_state = nullptr;  // [Dk, Dv]; nullptr = zero state
  const Acc* decay = nullptr;          // [T, Tk] explicit decay matrix; nullptr = gamma's powers
};

template <typename Acc>
struct HeadOutputs {
  Acc* out = nullptr;          // [T, Dv]
  Acc* final_state = nullptr;  // [Dk, Dv]; nullptr = not wanted
};

template <typename Acc>
struct HeadGradients {
  const Acc* grad_out = nullptr;          // [T, Dv]
  const Acc* grad_final_state = nullptr;  // [Dk, Dv]; nullptr = zero
  Acc* grad_q = nullptr;                  // [T, Dk]
  Acc* grad_k = nullptr;                  // [Tk, Dk]
  Acc* grad_v = nullptr;                  // [Tk, Dv]
  Acc* grad_initial_state = nullptr;      // [Dk, Dv]; nullptr = not wanted
};

// The forms. Each writes every element of its outputs. chunk_size >= 1.
template <typename Acc>
void parallel_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out);
template <typename Acc>
void parallel_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad);
template <typename Acc>
void chunkwise_forward(const HeadInputs<Acc>& in, int64_t chunk_size, const HeadOutputs<Acc>& out);
template <typename Acc>
void chunkwise_backward(const HeadInputs<Acc>& in, int64_t chunk_size, const HeadGradients<Acc>& grad);
template <typename Acc>
void recurrent_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out);
template <typename Acc>
void recurrent_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad);
// RetNet's normalised parallel form; no initial or final state.
template <typename Acc>
void normalized_parallel_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out);
template <typename Acc>
void normalized_parallel_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad);
// The parallel form over an explicit decay matrix (in.decay), optionally with the score normalisation only.
template <typename Acc>
void decay_matrix_forward(const HeadInputs<Acc>& in, bool normalize, const HeadOutputs<Acc>& out);
template <typename Acc>
void decay_matrix_backward(const HeadInputs<Acc>& in, bool normalize, const HeadGradients<Acc>& grad);

}  // namespace attnkit::cpu::retention
