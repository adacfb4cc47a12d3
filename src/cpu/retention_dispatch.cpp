// The CPU backend's retention entry points. They resolve the per-head decay and the scale, then run
// one (batch, head) slice per OpenMP task: gather q, k, v (and the state) into dense buffers of the
// accumulation type, run the requested form, scatter the results. Accumulation is float for
// f32/f16/bf16 inputs and double for f64 inputs; the state tensors are read and written in their
// own dtype (f32, or f64 alongside f64 inputs).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/retention_head.hpp"
#include "cpu/retention_strided_io.hpp"

namespace attnkit::cpu {
namespace {

using retention::HeadGradients;
using retention::HeadInputs;
using retention::HeadOutputs;
using retention::state_block;
using retention::StridedBlock;
using retention::token_block;

struct RetentionGeometry {
  int64_t batch = 0, tokens = 0, tokens_k = 0, heads = 0, head_dim = 0, head_dim_v = 0;
  std::vector<double> gamma;
  double scale = 0.0;
};

RetentionGeometry describe(const TensorView& q, const TensorView& v, const std::vector<double>& gamma,
                           const std::optional<double>& scale) {
  RetentionGeometry g;
  g.batch = q.extents[0];
  g.tokens = q.extents[1];
  g.tokens_k = v.extents[1];
  g.heads = q.extents[2];
  g.head_dim = q.extents[3];
  g.head_dim_v = v.extents[3];
  g.gamma = gamma.empty() ? default_retention_gamma(g.heads) : gamma;
  g.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(g.head_dim)));
  return g;
}

// No more threads than (batch, head) slices: idle threads would only allocate buffers and wait.
int thread_count(const RunOptions& options, int64_t slices) {
  const int64_t wanted = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, slices)));
}

// Validation owns these rules; the backend repeats the one whose violation would leave outputs unwritten.
void require_no_state_with_normalize(bool normalize, RetentionMode mode, bool any_state) {
  if (!normalize) return;
  if (mode != RetentionMode::parallel) {
    throw Error(Status::invalid_argument, "normalize: true with mode " + std::to_string(static_cast<int>(mode)) +
                                              "; allowed: normalize only with mode parallel");
  }
  if (any_state) {
    throw Error(Status::invalid_argument,
                "initial_state / final_state: given with normalize = true; allowed: no state tensors with normalize");
  }
}

void require_decay_matrix_parallel(const TensorView& decay, RetentionMode mode) {
  if (decay.defined() && mode != RetentionMode::parallel) {
    throw Error(Status::invalid_argument, "decay: given with mode " + std::to_string(static_cast<int>(mode)) +
                                              "; allowed: a decay matrix only with mode parallel");
  }
}

// Per-thread dense copies of one (batch, head) slice.
template <typename Acc>
struct HeadBuffers {
  std::vector<Acc> q, k, v, state, decay, out, final_state;
  std::vector<Acc> grad_out, grad_final_state, grad_q, grad_k, grad_v, grad_initial_state;
  HeadBuffers(const RetentionGeometry& g, bool has_decay) {
    const auto qk = static_cast<std::size_t>(g.tokens * g.head_dim);
    const auto tv = static_cast<std::size_t>(g.tokens * g.head_dim_v);
    const auto kk = static_cast<std::size_t>(g.tokens_k * g.head_dim);
    const auto kv = static_cast<std::size_t>(g.tokens_k * g.head_dim_v);
    const auto s = static_cast<std::size_t>(g.head_dim * g.head_dim_v);
    q.resize(qk), k.resize(kk), v.resize(kv), state.resize(s), out.resize(tv), final_state.resize(s);
    if (has_decay) decay.resize(static_cast<std::size_t>(g.tokens * g.tokens_k));
    grad_out.resize(tv), grad_final_state.resize(s), grad_q.resize(qk), grad_k.resize(kk), grad_v.resize(kv),
        grad_initial_state.resize(s);
  }
};

// The [Tq, Tk] block of a [H|1, Tq, Tk] decay matrix for head h.
StridedBlock decay_block(const TensorView& decay, int64_t h) {
  const int64_t head = decay.extents[0] == 1 ? 0 : h;
  return {head * decay.strides[0], decay.extents[1], decay.strides[1], decay.extents[2], decay.strides[2]};
}

template <typename Acc>
HeadInputs<Acc> gather_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& initial_state, const TensorView& decay, const RetentionGeometry& g,
                              int64_t b, int64_t h, HeadBuffers<Acc>& buf) {
  retention::gather_block(q, token_block(q, b, h), buf.q.data());
  retention::gather_block(k, token_block(k, b, h), buf.k.data());
  retention::gather_block(v, token_block(v, b, h), buf.v.data());
  HeadInputs<Acc> in;
  in.tokens = g.tokens;
  in.tokens_k = g.tokens_k;
  in.head_dim = g.head_dim;
  in.head_dim_v = g.head_dim_v;
  in.gamma = g.gamma[static_cast<std::size_t>(h)];
  in.scale = g.scale;
  in.q = buf.q.data();
  in.k = buf.k.data();
  in.v = buf.v.data();
  if (initial_state.defined()) {
    retention::gather_block(initial_state, state_block(initial_state, b, h), buf.state.data());
    in.initial_state = buf.state.data();
  }
  if (decay.defined()) {
    retention::gather_block(decay, decay_block(decay, h), buf.decay.data());
    in.decay = buf.decay.data();
  }
  return in;
}

template <typename Acc>
void forward_heads(const RetentionForward& p, const RetentionGeometry& g, const RunOptions& options) {
  const int64_t slices = g.batch * g.heads;
#pragma omp parallel num_threads(thread_count(options, slices))
  {
    HeadBuffers<Acc> buf(g, p.decay.defined());
#pragma omp for schedule(dynamic, 1)
    for (int64_t slice = 0; slice < slices; ++slice) {
      const int64_t b = slice / g.heads, h = slice % g.heads;
      const HeadInputs<Acc> in = gather_inputs(p.q, p.k, p.v, p.initial_state, p.decay, g, b, h, buf);
      HeadOutputs<Acc> out{buf.out.data(), p.final_state.defined() ? buf.final_state.data() : nullptr};
      if (in.decay != nullptr) {
        retention::decay_matrix_forward(in, p.normalize, out);
      } else if (p.normalize) {
        retention::normalized_parallel_forward(in, out);
      } else if (p.mode == RetentionMode::parallel) {
        retention::parallel_forward(in, out);
      } else if (p.mode == RetentionMode::chunkwise) {
        retention::chunkwise_forward(in, p.chunk_size, out);
      } else {
        retention::recurrent_forward(in, out);
      }
      retention::scatter_block(buf.out.data(), p.out, token_block(p.out, b, h));
      if (p.final_state.defined()) {
        retention::scatter_block(buf.final_state.data(), p.final_state, state_block(p.final_state, b, h));
      }
    }
  }
}

template <typename Acc>
void backward_heads(const RetentionBackward& p, const RetentionGeometry& g, const RunOptions& options) {
  const int64_t slices = g.batch * g.heads;
#pragma omp parallel num_threads(thread_count(options, slices))
  {
    HeadBuffers<Acc> buf(g, p.decay.defined());
#pragma omp for schedule(dynamic, 1)
    for (int64_t slice = 0; slice < slices; ++slice) {
      const int64_t b = slice / g.heads, h = slice % g.heads;
      const HeadInputs<Acc> in = gather_inputs(p.q, p.k, p.v, p.initial_state, p.decay, g, b, h, buf);
      retention::gather_block(p.grad_out, token_block(p.grad_out, b, h), buf.grad_out.data());
      HeadGradients<Acc> grad;
      grad.grad_out = buf.grad_out.data();
      if (p.grad_final_state.defined()) {
        retention::gather_block(p.grad_final_state, state_block(p.grad_final_state, b, h), buf.grad_final_state.data());
        grad.grad_final_state = buf.grad_final_state.data();
      }
      grad.grad_q = buf.grad_q.data();
      grad.grad_k = buf.grad_k.data();
      grad.grad_v = buf.grad_v.data();
      if (p.grad_initial_state.defined()) grad.grad_initial_state = buf.grad_initial_state.data();
      if (in.decay != nullptr) {
        retention::decay_matrix_backward(in, p.normalize, grad);
      } else if (p.normalize) {
        retention::normalized_parallel_backward(in, grad);
      } else if (p.mode == RetentionMode::parallel) {
        retention::parallel_backward(in, grad);
      } else if (p.mode == RetentionMode::chunkwise) {
        retention::chunkwise_backward(in, p.chunk_size, grad);
      } else {
        retention::recurrent_backward(in, grad);
      }
      retention::scatter_block(buf.grad_q.data(), p.grad_q, token_block(p.grad_q, b, h));
      retention::scatter_block(buf.grad_k.data(), p.grad_k, token_block(p.grad_k, b, h));
      retention::scatter_block(buf.grad_v.data(), p.grad_v, token_block(p.grad_v, b, h));
      if (p.grad_initial_state.defined()) {
        retention::scatter_block(buf.grad_initial_state.data(), p.grad_initial_state,
                                 state_block(p.grad_initial_state, b, h));
      }
    }
  }
}

}  // namespace

void retention_forward(const RetentionForward& problem, const RunOptions& options) {
  require_no_state_with_normalize(problem.normalize, problem.mode,
                                  problem.initial_state.defined() || problem.final_state.defined());
  const RetentionGeometry g = describe(problem.q, problem.v, problem.gamma, problem.scale);
  require_decay_matrix_parallel(problem.decay, problem.mode);
  if (problem.q.dtype == DType::f64) {
    forward_heads<double>(problem, g, options);
  } else {
    forward_heads<float>(problem, g, options);
  }
}

void retention_backward(const RetentionBackward& problem, const RunOptions& options) {
  require_no_state_with_normalize(
      problem.normalize, problem.mode,
      problem.initial_state.defined() || problem.grad_final_state.defined() || problem.grad_initial_state.defined());
  const RetentionGeometry g = describe(problem.q, problem.v, problem.gamma, problem.scale);
  require_decay_matrix_parallel(problem.decay, problem.mode);
  if (problem.q.dtype == DType::f64) {
    backward_heads<double>(problem, g, options);
  } else {
    backward_heads<float>(problem, g, options);
  }
}

}  // namespace attnkit::cpu
