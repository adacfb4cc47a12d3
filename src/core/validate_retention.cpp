// Validation of retention_forward / retention_backward (DESIGN §3 Retention). q, k [B, T, H, Dk],
// v [B, T, H, Dv], out and grad_out [B, T, H, Dv], gradients shaped like their primals; the
// recurrent state tensors are [B, H, Dk, Dv] in float32 (float64 when the inputs are float64).
// Then the scalar parameters: gamma, mode, chunk_size, normalize and scale. With the explicit decay matrix
// [H|1, Tq, Tk] (parallel form only), k and v have Tk tokens and q, out Tq.
#include <array>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "core/validate.hpp"
#include "core/validate_checks.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail {
namespace {

using namespace checks;

using NamedView = std::pair<const TensorView*, const char*>;

constexpr const char* kQkLayout = "[B, T, H, Dk]";
constexpr const char* kVLayout = "[B, T, H, Dv]";
constexpr const char* kStateLayout = "[B, H, Dk, Dv]";

DType state_dtype_for(const TensorView& q) { return q.dtype == DType::f64 ? DType::f64 : DType::f32; }

std::vector<int64_t> extents_of(const TensorView& view) {
  return std::vector<int64_t>(view.extents.begin(), view.extents.begin() + view.rank);
}

void check_sequence_tensor(const TensorView& view, const char* name, const TensorView& q, const char* layout) {
  check_view_structure(view, name, 4, 4, layout);
  if (&view == &q) {
    check_floating_dtype(q, "q");
  } else {
    check_same_dtype(view, name, q, "q");
    check_same_device(view, name, q, "q");
  }
  check_last_dim_contiguous(view, name);
  check_aligned(view, name);
}

// k like q; v and out/grad_out [B, T, H, Dv] with B, T, H from q and Dv from v. With a decay matrix, k and v
// have their own token count Tk (the matrix's last extent) and out/grad_out q's Tq.
void check_sequence_shapes(const TensorView& q, const TensorView& k, const TensorView& v, const NamedView& out,
                           bool has_decay) {
  if (has_decay) {
    const std::vector<int64_t> k_extents{q.extents[0], k.extents[1], q.extents[2], q.extents[3]};
    check_shape_equals(k, "k", k_extents, "[B, Tk, H, Dk] with B, H, Dk from q (Tk: the decay matrix's keys)");
    const std::vector<int64_t> v_extents{q.extents[0], k.extents[1], q.extents[2], v.extents[3]};
    check_shape_equals(v, "v", v_extents, "[B, Tk, H, Dv] with B, Tk, H from q and k");
  } else {
    check_shape_equals(k, "k", extents_of(q), "[B, T, H, Dk], q's shape");
    const std::vector<int64_t> v_extents{q.extents[0], q.extents[1], q.extents[2], v.extents[3]};
    check_shape_equals(v, "v", v_extents, "[B, T, H, Dv] with B, T, H from q");
  }
  const std::vector<int64_t> out_extents{q.extents[0], q.extents[1], q.extents[2], v.extents[3]};
  check_shape_equals(*out.first, out.second, out_extents, "[B, Tq, H, Dv] from q and v");
}

void check_state_tensor(const TensorView& view, const char* name, const TensorView& q, const TensorView& v,
                        bool is_output) {
  check_view_structure(view, name, 4, 4, kStateLayout);
  check_dtype_is(view, name, state_dtype_for(q),
                 "the recurrent state is float32, or float64 when the inputs are float64");
  check_same_device(view, name, q, "q");
  check_last_dim_contiguous(view, name);
  check_aligned(view, name);
  if (is_output) {
    check_output_not_broadcast(view, name);
  }
  const std::vector<int64_t> expected{q.extents[0], q.extents[2], q.extents[3], v.extents[3]};
  check_shape_equals(view, name, expected, "[B, H, Dk, Dv] from q and v");
}

void check_gamma(const std::vector<double>& gamma, int64_t heads) {
  if (!gamma.empty() && static_cast<int64_t>(gamma.size()) != heads) {
    fail("gamma: " + std::to_string(gamma.size()) + " values; allowed: " + std::to_string(heads) +
         " (one per head) or none for the default 1 - 2^(-5-h)");
  }
  for (std::size_t h = 0; h < gamma.size(); ++h) {
    if (!(std::isfinite(gamma[h]) && gamma[h] > 0.0 && gamma[h] < 1.0)) {
      fail("gamma[" + std::to_string(h) + "]: " + number_string(gamma[h]) +
           "; allowed: a finite decay strictly between 0 and 1");
    }
  }
}

void check_mode(RetentionMode mode) {
  const auto value = static_cast<int32_t>(mode);
  if (value < static_cast<int32_t>(RetentionMode::parallel) || value > static_cast<int32_t>(RetentionMode::recurrent)) {
    fail("mode: " + std::to_string(value) + "; allowed: 0 (parallel), 1 (chunkwise), 2 (recurrent)");
  }
}

const char* mode_name(RetentionMode mode) {
  switch (mode) {
    case RetentionMode::parallel: return "parallel";
    case RetentionMode::chunkwise: return "chunkwise";
    case RetentionMode::recurrent: return "recurrent";
  }
  return "unknown";
}

// The explicit decay matrix [H|1, Tq, Tk]: parallel form only, instead of gamma and of any state.
void check_decay_matrix(const TensorView& decay, const TensorView& q, const TensorView& k, RetentionMode mode,
                        const std::vector<double>& gamma, std::initializer_list<NamedView> states) {
  check_view_structure(decay, "decay", 3, 3, "[H|1, Tq, Tk]");
  if (decay.dtype != DType::f32 && decay.dtype != q.dtype) {
    fail("decay: dtype " + std::string(dtype_name(decay.dtype)) + "; allowed: float32 or q's dtype (" +
         std::string(dtype_name(q.dtype)) + ")");
  }
  check_same_device(decay, "decay", q, "q");
  check_last_dim_contiguous(decay, "decay");
  check_aligned(decay, "decay");
  if (decay.extents[0] != 1 && decay.extents[0] != q.extents[2]) {
    fail("decay: " + std::to_string(decay.extents[0]) + " heads; allowed: 1 (shared) or q's " +
         std::to_string(q.extents[2]));
  }
  const std::vector<int64_t> expected{decay.extents[0], q.extents[1], k.extents[1]};
  check_shape_equals(decay, "decay", expected, "[H|1, Tq, Tk] with Tq from q and Tk from k");
  if (mode != RetentionMode::parallel) {
    fail(std::string("decay: given with mode=") + mode_name(mode) +
         "; an explicit decay matrix weighs every (query, key) pair, which only the parallel form computes; "
         "allowed: mode=parallel, or no decay (per-head gamma)");
  }
  if (!gamma.empty()) {
    fail("gamma: " + std::to_string(gamma.size()) +
         " values given with a decay matrix; allowed: one of them (the matrix replaces gamma)");
  }
  for (const auto& [state, name] : states) {
    if (is_given(*state)) {
      fail(std::string("decay: given with ") + name + "; an explicit decay matrix has no recurrent state; allowed: " +
           "no " + name + " with decay, or per-head gamma");
    }
  }
}

void check_chunk_size(int64_t chunk_size) {
  if (chunk_size < 1) {
    fail("chunk_size: " + std::to_string(chunk_size) + "; allowed: chunk_size >= 1 (tokens per chunk)");
  }
}

void check_normalize_mode(bool normalize, RetentionMode mode) {
  if (normalize && mode != RetentionMode::parallel) {
    fail(std::string("normalize: true with mode=") + mode_name(mode) +
         "; normalize=true needs every past key of a row at once, which only the parallel form has; allowed: "
         "mode=parallel, or normalize=false");
  }
}

void check_normalize_without_state(bool normalize, const TensorView& state, const char* name) {
  if (normalize && is_given(state)) {
    fail(std::string("normalize: true with ") + name + " given; the normalised form has no recurrent state to " +
         "carry; allowed: normalize=false when passing " + name + ", or no " + name);
  }
}

void check_scalar_parameters(const std::vector<double>& gamma, int64_t heads, RetentionMode mode, int64_t chunk_size,
                             bool normalize, const std::optional<double>& scale) {
  check_gamma(gamma, heads);
  check_mode(mode);
  check_chunk_size(chunk_size);
  check_normalize_mode(normalize, mode);
  check_scale(scale, "1/sqrt(Dk)");
}

}  // namespace

void validate_retention_forward(const RetentionForward& p, const RunOptions& options) {
  check_run_options(options);
  const std::array<NamedView, 4> tensors{{{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.out, "out"}}};
  const std::array<const char*, 4> layouts{kQkLayout, kQkLayout, kVLayout, kVLayout};
  for (const auto& [view, name] : tensors) {
    check_present(*view, name);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_sequence_tensor(*tensors[i].first, tensors[i].second, p.q, layouts[i]);
  }
  check_output_not_broadcast(p.out, "out");
  const bool has_decay = is_given(p.decay);
  check_sequence_shapes(p.q, p.k, p.v, {&p.out, "out"}, has_decay);
  if (is_given(p.initial_state)) {
    check_state_tensor(p.initial_state, "initial_state", p.q, p.v, false);
  }
  if (is_given(p.final_state)) {
    check_state_tensor(p.final_state, "final_state", p.q, p.v, true);
  }

  check_scalar_parameters(p.gamma, p.q.extents[2], p.mode, p.chunk_size, p.normalize, p.scale);
  check_normalize_without_state(p.normalize, p.initial_state, "initial_state");
  check_normalize_without_state(p.normalize, p.final_state, "final_state");
  if (has_decay) {
    check_decay_matrix(p.decay, p.q, p.k, p.mode, p.gamma,
                       {{&p.initial_state, "initial_state"}, {&p.final_state, "final_state"}});
  }
}

void validate_retention_backward(const RetentionBackward& p, const RunOptions& options) {
  check_run_options(options);
  const std::array<NamedView, 7> tensors{{{&p.q, "q"},
                                          {&p.k, "k"},
                                          {&p.v, "v"},
                                          {&p.grad_out, "grad_out"},
                                          {&p.grad_q, "grad_q"},
                                          {&p.grad_k, "grad_k"},
                                          {&p.grad_v, "grad_v"}}};
  const std::array<const char*, 7> layouts{kQkLayout, kQkLayout, kVLayout, kVLayout, kQkLayout, kQkLayout, kVLayout};
  for (const auto& [view, name] : tensors) {
    check_present(*view, name);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_sequence_tensor(*tensors[i].first, tensors[i].second, p.q, layouts[i]);
  }
  check_output_not_broadcast(p.grad_q, "grad_q");
  check_output_not_broadcast(p.grad_k, "grad_k");
  check_output_not_broadcast(p.grad_v, "grad_v");
  const bool has_decay = is_given(p.decay);
  check_sequence_shapes(p.q, p.k, p.v, {&p.grad_out, "grad_out"}, has_decay);
  check_shape_equals(p.grad_q, "grad_q", extents_of(p.q), "q's shape");
  check_shape_equals(p.grad_k, "grad_k", extents_of(p.k), "k's shape");
  check_shape_equals(p.grad_v, "grad_v", extents_of(p.v), "v's shape");
  if (is_given(p.initial_state)) {
    check_state_tensor(p.initial_state, "initial_state", p.q, p.v, false);
  }
  if (is_given(p.grad_final_state)) {
    check_state_tensor(p.grad_final_state, "grad_final_state", p.q, p.v, false);
  }
  if (is_given(p.grad_initial_state)) {
    check_state_tensor(p.grad_initial_state, "grad_initial_state", p.q, p.v, true);
  }

  check_scalar_parameters(p.gamma, p.q.extents[2], p.mode, p.chunk_size, p.normalize, p.scale);
  check_normalize_without_state(p.normalize, p.initial_state, "initial_state");
  check_normalize_without_state(p.normalize, p.grad_final_state, "grad_final_state");
  check_normalize_without_state(p.normalize, p.grad_initial_state, "grad_initial_state");
  if (has_decay) {
    check_decay_matrix(p.decay, p.q, p.k, p.mode, p.gamma,
                       {{&p.initial_state, "initial_state"},
                        {&p.grad_final_state, "grad_final_state"},
                        {&p.grad_initial_state, "grad_initial_state"}});
  }
}

}  // namespace attnkit::detail
