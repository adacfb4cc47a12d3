// Literal double-precision retention (see retention_reference.hpp). Each (batch, head) pair is one
// independent loop nest; OpenMP spreads the pairs only so that checking a large problem does not
// take minutes. Normalised retention builds its T x T score matrix explicitly, term by term.
#include "cpu/retention_reference.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/float_convert.hpp"

namespace attnkit::cpu::reference {
namespace {

struct Sizes {
  int64_t batch, tokens, heads, dk, dv;
};

Sizes sizes_of(const TensorView& q, const TensorView& v) {
  return {q.extents[0], q.extents[1], q.extents[2], q.extents[3], v.extents[3]};
}

// Element (b, t, h, x) of a [B, T, H, X] view, or (b, h, i, j) of a [B, H, Dk, Dv] state.
double at(const TensorView& view, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t offset = i0 * view.strides[0] + i1 * view.strides[1] + i2 * view.strides[2] + i3 * view.strides[3];
  return detail::load_as_double(view.data, view.dtype, offset);
}

void put(const TensorView& view, int64_t i0, int64_t i1, int64_t i2, int64_t i3, double value) {
  const int64_t offset = i0 * view.strides[0] + i1 * view.strides[1] + i2 * view.strides[2] + i3 * view.strides[3];
  detail::store_from_double(view.data, view.dtype, offset, value);
}

double token_dot(const TensorView& a, int64_t ta, const TensorView& b, int64_t tb, int64_t bi, int64_t h, int64_t n) {
  double sum = 0.0;
  for (int64_t x = 0; x < n; ++x) sum += at(a, bi, ta, h, x) * at(b, bi, tb, h, x);
  return sum;
}

double state_at(const TensorView& state, int64_t b, int64_t h, int64_t i, int64_t j) {
  return state.defined() ? at(state, b, h, i, j) : 0.0;
}

int threads(const RunOptions& options) { return options.num_threads > 0 ? options.num_threads : omp_get_max_threads(); }

std::vector<double> gammas(const std::vector<double>& gamma, int64_t heads) {
  return gamma.empty() ? default_retention_gamma(heads) : gamma;
}

double resolved_scale(const std::optional<double>& scale, int64_t dk) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(dk)));
}

// The normalised score matrix of one head: s[t][m] = scale (q_t . k_m) D[t][m], then each row divided
// by max(sum_m |s[t][m]|, 1). Also returns the raw scores and the clamped row sums for the backward.
struct NormalizedScores {
  std::vector<std::vector<double>> raw, normalized, weight;  // weight = scale * D[t][m]
  std::vector<double> abs_sum;
};

NormalizedScores normalized_scores(const TensorView& q, const TensorView& k, const Sizes& n, int64_t b, int64_t h,
                                   double gamma, double scale) {
  NormalizedScores r;
  const auto T = static_cast<std::size_t>(n.tokens);
  r.raw.assign(T, std::vector<double>(T, 0.0));
  r.normalized = r.raw;
  r.weight = r.raw;
  r.abs_sum.assign(T, 0.0);
  for (int64_t t = 0; t < n.tokens; ++t) {
    double decay_row_sum = 0.0;
    for (int64_t m = 0; m <= t; ++m) decay_row_sum += std::pow(gamma, static_cast<double>(t - m));
    for (int64_t m = 0; m <= t; ++m) {
      r.weight[t][m] = scale * std::pow(gamma, static_cast<double>(t - m)) / std::sqrt(decay_row_sum);
      r.raw[t][m] = token_dot(q, t, k, m, b, h, n.dk) * r.weight[t][m];
      r.abs_sum[t] += std::abs(r.raw[t][m]);
    }
    for (int64_t m = 0; m <= t; ++m) r.normalized[t][m] = r.raw[t][m] / std::max(r.abs_sum[t], 1.0);
  }
  return r;
}

void normalized_forward(const RetentionForward& p, const Sizes& n, int64_t b, int64_t h, double gamma, double scale) {
  const NormalizedScores s = normalized_scores(p.q, p.k, n, b, h, gamma, scale);
  for (int64_t t = 0; t < n.tokens; ++t) {
    for (int64_t j = 0; j < n.dv; ++j) {
      double sum = 0.0;
      for (int64_t m = 0; m <= t; ++m) sum += s.normalized[t][m] * at(p.v, b, m, h, j);
      put(p.out, b, t, h, j, sum);
    }
  }
}

void plain_forward(const RetentionForward& p, const Sizes& n, int64_t b, int64_t h, double gamma, double scale) {
  for (int64_t t = 0; t < n.tokens; ++t) {
    std::vector<double> o(static_cast<std::size_t>(n.dv), 0.0);
    for (int64_t m = 0; m <= t; ++m) {
      const double w = scale * std::pow(gamma, static_cast<double>(t - m)) * token_dot(p.q, t, p.k, m, b, h, n.dk);
      for (int64_t j = 0; j < n.dv; ++j) o[j] += w * at(p.v, b, m, h, j);
    }
    const double carry = scale * std::pow(gamma, static_cast<double>(t + 1));
    for (int64_t i = 0; i < n.dk; ++i) {
      for (int64_t j = 0; j < n.dv; ++j) o[j] += carry * at(p.q, b, t, h, i) * state_at(p.initial_state, b, h, i, j);
    }
    for (int64_t j = 0; j < n.dv; ++j) put(p.out, b, t, h, j, o[j]);
  }
  if (!p.final_state.defined()) return;
  for (int64_t i = 0; i < n.dk; ++i) {
    for (int64_t j = 0; j < n.dv; ++j) {
      double s = std::pow(gamma, static_cast<double>(n.tokens)) * state_at(p.initial_state, b, h, i, j);
      for (int64_t m = 0; m < n.tokens; ++m) {
        s += std::pow(gamma, static_cast<double>(n.tokens - 1 - m)) * at(p.k, b, m, h, i) * at(p.v, b, m, h, j);
      }
      put(p.final_state, b, h, i, j, s);
    }
  }
}

// Pairwise dot products of one head, [t][m] for m <= t: the (q_t . k_m) and (dO_t . v_m) that every
// gradient sum below reuses, computed once instead of once per output element.
std::vector<std::vector<double>> pair_dots(const TensorView& a, const TensorView& b, int64_t tokens, int64_t bi,
                                           int64_t h, int64_t n) {
  std::vector<std::vector<double>> dots(static_cast<std::size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    dots[t].resize(static_cast<std::size_t>(t + 1));
    for (int64_t m = 0; m <= t; ++m) dots[t][m] = token_dot(a, t, b, m, bi, h, n);
  }
  return dots;
}

void plain_backward(const RetentionBackward& p, const Sizes& n, int64_t b, int64_t h, double gamma, double scale) {
  const int64_t T = n.tokens;
  auto decay = [gamma](int64_t e) { return std::pow(gamma, static_cast<double>(e)); };
  const auto qk = pair_dots(p.q, p.k, T, b, h, n.dk);
  const auto dp = pair_dots(p.grad_out, p.v, T, b, h, n.dv);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n.dk; ++i) {
      // dq_t = scale sum_{m<=t} gamma^(t-m) (dO_t . v_m) k_m + scale gamma^(t+1) S_{-1} dO_t
      double dq = 0.0;
      for (int64_t m = 0; m <= t; ++m) dq += scale * decay(t - m) * dp[t][m] * at(p.k, b, m, h, i);
      for (int64_t j = 0; j < n.dv; ++j) {
        dq += scale * decay(t + 1) * state_at(p.initial_state, b, h, i, j) * at(p.grad_out, b, t, h, j);
      }
      put(p.grad_q, b, t, h, i, dq);
    }
  }
  for (int64_t m = 0; m < T; ++m) {
    for (int64_t i = 0; i < n.dk; ++i) {
      // dk_m = scale sum_{t>=m} gamma^(t-m) (dO_t . v_m) q_t + gamma^(T-1-m) G v_m
      double dk = 0.0;
      for (int64_t t = m; t < T; ++t) dk += scale * decay(t - m) * dp[t][m] * at(p.q, b, t, h, i);
      for (int64_t j = 0; j < n.dv; ++j) {
        dk += decay(T - 1 - m) * state_at(p.grad_final_state, b, h, i, j) * at(p.v, b, m, h, j);
      }
      put(p.grad_k, b, m, h, i, dk);
    }
    for (int64_t j = 0; j < n.dv; ++j) {
      // dv_m = scale sum_{t>=m} gamma^(t-m) (q_t . k_m) dO_t + gamma^(T-1-m) k_m G
      double dv = 0.0;
      for (int64_t t = m; t < T; ++t) dv += scale * decay(t - m) * qk[t][m] * at(p.grad_out, b, t, h, j);
      for (int64_t i = 0; i < n.dk; ++i) {
        dv += decay(T - 1 - m) * at(p.k, b, m, h, i) * state_at(p.grad_final_state, b, h, i, j);
      }
      put(p.grad_v, b, m, h, j, dv);
    }
  }
  if (!p.grad_initial_state.defined()) return;
  for (int64_t i = 0; i < n.dk; ++i) {
    for (int64_t j = 0; j < n.dv; ++j) {
      // dS_{-1} = gamma^T G + scale sum_t gamma^(t+1) q_t^T dO_t
      double ds = decay(T) * state_at(p.grad_final_state, b, h, i, j);
      for (int64_t t = 0; t < T; ++t) ds += scale * decay(t + 1) * at(p.q, b, t, h, i) * at(p.grad_out, b, t, h, j);
      put(p.grad_initial_state, b, h, i, j, ds);
    }
  }
}

// Gradient of o_t = sum_m (s[t][m] / max(a_t, 1)) v_m with the clamp differentiated (see
// cpu/retention_normalized.cpp for the convention at a_t == 1 and sign(0) = 0).
void normalized_backward(const RetentionBackward& p, const Sizes& n, int64_t b, int64_t h, double gamma, double scale) {
  const int64_t T = n.tokens;
  const NormalizedScores s = normalized_scores(p.q, p.k, n, b, h, gamma, scale);
  std::vector<std::vector<double>> d_raw(static_cast<std::size_t>(T),
                                         std::vector<double>(static_cast<std::size_t>(T), 0.0));
  for (int64_t t = 0; t < T; ++t) {
    const double denominator = std::max(s.abs_sum[t], 1.0);
    const double clamp_slope = s.abs_sum[t] > 1.0 ? 1.0 : 0.0;
    double pull = 0.0;
    std::vector<double> dp(static_cast<std::size_t>(t + 1));
    for (int64_t m = 0; m <= t; ++m) {
      dp[m] = token_dot(p.grad_out, t, p.v, m, b, h, n.dv);
      pull += dp[m] * s.raw[t][m];
    }
    for (int64_t m = 0; m <= t; ++m) {
      const double sign = static_cast<double>((s.raw[t][m] > 0) - (s.raw[t][m] < 0));
      d_raw[t][m] = dp[m] / denominator - clamp_slope * sign * pull / (denominator * denominator);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n.dk; ++i) {
      double dq = 0.0;
      for (int64_t m = 0; m <= t; ++m) dq += d_raw[t][m] * s.weight[t][m] * at(p.k, b, m, h, i);
      put(p.grad_q, b, t, h, i, dq);
    }
  }
  for (int64_t m = 0; m < T; ++m) {
    for (int64_t i = 0; i < n.dk; ++i) {
      double dk = 0.0;
      for (int64_t t = m; t < T; ++t) dk += d_raw[t][m] * s.weight[t][m] * at(p.q, b, t, h, i);
      put(p.grad_k, b, m, h, i, dk);
    }
    for (int64_t j = 0; j < n.dv; ++j) {
      double dv = 0.0;
      for (int64_t t = m; t < T; ++t) dv += s.normalized[t][m] * at(p.grad_out, b, t, h, j);
      put(p.grad_v, b, m, h, j, dv);
    }
  }
  if (p.grad_initial_state.defined()) {
    for (int64_t i = 0; i < n.dk; ++i) {
      for (int64_t j = 0; j < n.dv; ++j) put(p.grad_initial_state, b, h, i, j, 0.0);
    }
  }
}

}  // namespace

void retention_forward(const RetentionForward& problem, const RunOptions& options) {
  const Sizes n = sizes_of(problem.q, problem.v);
  const std::vector<double> gamma = gammas(problem.gamma, n.heads);
  const double scale = resolved_scale(problem.scale, n.dk);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads(options))
  for (int64_t slice = 0; slice < n.batch * n.heads; ++slice) {
    const int64_t b = slice / n.heads, h = slice % n.heads;
    if (problem.normalize) {
      normalized_forward(problem, n, b, h, gamma[h], scale);
    } else {
      plain_forward(problem, n, b, h, gamma[h], scale);
    }
  }
}

void retention_backward(const RetentionBackward& problem, const RunOptions& options) {
  const Sizes n = sizes_of(problem.q, problem.v);
  const std::vector<double> gamma = gammas(problem.gamma, n.heads);
  const double scale = resolved_scale(problem.scale, n.dk);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads(options))
  for (int64_t slice = 0; slice < n.batch * n.heads; ++slice) {
    const int64_t b = slice / n.heads, h = slice % n.heads;
    if (problem.normalize) {
      normalized_backward(problem, n, b, h, gamma[h], scale);
    } else {
      plain_backward(problem, n, b, h, gamma[h], scale);
    }
  }
}

}  // namespace attnkit::cpu::reference
