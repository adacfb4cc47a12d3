// RetNet retention (DESIGN §3). q, k [B, T, H, Dk], v [B, T, H, Dv], out [B, T, H, Dv].
// State S [B, H, Dk, Dv] (fp32; fp64 when the inputs are fp64): S_t = gamma * S_{t-1} + k_t^T v_t with S_{-1} =
// initial_state (zero when absent); out_t = scale * q_t S_t, i.e. scale * sum_{m<=t} gamma^(t-m) (q_t.k_m) v_m
// + scale * gamma^(t+1) q_t S_{-1}. final_state = S_{T-1}.
//
// Explicit decay matrix (mode == parallel): instead of per-head gamma, a tensor decay [H|1, Tq, Tk] gives every
// (query, key) weight: out_t = scale * sum_m decay[h, t, m] (q_t . k_m) v_m over all Tk keys (the matrix decides
// which keys count: zeros above the diagonal give causal retention). q has Tq tokens, k and v Tk (Tq != Tk
// allowed). With normalize, only RetNet's score normalisation applies (scores / max(|row sum|, 1)); the
// matrix is used as given (RetNet builds its decay rows divided by sqrt(row sum) into it). The matrix is a
// constant: the backward gives no gradient for it. No recurrent state, no gamma.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>
#include "attnkit/export.hpp"

#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

enum class RetentionMode : int32_t { parallel = 0, chunkwise = 1, recurrent = 2 };

// Default per-head decay: gamma_h = 1 - 2^(-5-h).
ATTNKIT_API std::vector<double> default_retention_gamma(int64_t heads);

struct RetentionForward {
  TensorView q, k, v;
  TensorView out;
  TensorView initial_state;   // optional input, fp32 (fp64 for fp64 inputs) [B, H, Dk, Dv]
  TensorView final_state;     // optional output, same dtype as initial_state
  std::vector<double> gamma;  // per head, each in (0, 1); empty = default_retention_gamma(H)
  RetentionMode mode = RetentionMode::chunkwise;
  int64_t chunk_size = 64;
  std::optional<double> scale;  // default 1/sqrt(Dk)
  // Original RetNet parallel normalisation: decay rows divided by sqrt of their sum, scores divided
  // by the absolute row sum clamped to >= 1. Needs every past key, so only mode == parallel.
  bool normalize = false;
  // Optional, mode == parallel only: the explicit decay matrix [H|1, Tq, Tk] (see above), float32 or the
  // inputs' dtype, last dimension contiguous. Given: gamma empty, no initial_state / final_state.
  TensorView decay{};
};

struct RetentionBackward {
  TensorView q, k, v, grad_out;
  TensorView initial_state;     // optional, as in the forward
  TensorView grad_final_state;  // optional incoming gradient of final_state
  TensorView grad_q, grad_k, grad_v;
  TensorView grad_initial_state;  // optional output, fp32 [B, H, Dk, Dv]
  std::vector<double> gamma;
  RetentionMode mode = RetentionMode::chunkwise;
  int64_t chunk_size = 64;
  std::optional<double> scale;
  bool normalize = false;
  TensorView decay{};  // as in the forward
};

ATTNKIT_API void retention_forward(const RetentionForward& problem, const RunOptions& options = {});
ATTNKIT_API void retention_backward(const RetentionBackward& problem, const RunOptions& options = {});

}  // namespace attnkit
