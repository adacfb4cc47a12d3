// RetNet's normalised parallel retention for one (batch, head) slice (option `normalize`).
//   D[t, m] = gamma^(t-m) / sqrt(r_t),  r_t = sum_{j<=t} gamma^j   (m <= t; each decay row scaled)
//   s[t, m] = scale * (q_t . k_m) * D[t, m]
//   a_t = sum_m |s[t, m]|,  n_t = max(a_t, 1),  o_t = sum_m (s[t, m] / n_t) v_m
// That is the decay-matrix form with normalize: query row t's keys are m <= t, its weights gamma^(t-m) and its
// factor scale / sqrt(r_t). The weights of every row are one array of gamma's powers in reverse order (row t
// starts T-1-t into it), so no row is copied. Powers that underflow to 0 still multiply through (they mask
// nothing). The rows, the normaliser and the backward are retention_weighted_rows.hpp's. There is no state in or
// out.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/retention_head.hpp"
#include "cpu/retention_math.hpp"
#include "cpu/retention_weighted_rows.hpp"

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

// Row t: keys [0, t], weights gamma^(t-m), factor scale / sqrt(r_t).
template <typename Acc>
class GammaRows {
 public:
  explicit GammaRows(const HeadInputs<Acc>& in)
      : tokens_(in.tokens),
        reversed_powers_(decay_powers<Acc>(in.gamma, in.tokens - 1)),
        row_norm_(inverse_sqrt_row_sums<Acc>(in.gamma, in.tokens)),
        scale_(static_cast<Acc>(in.scale)) {
    std::reverse(reversed_powers_.begin(), reversed_powers_.end());  // [j] = gamma^(T-1-j)
  }

  WeightRow<Acc> operator()(int64_t t) const {
    return {reversed_powers_.data() + (tokens_ - 1 - t), t + 1, scale_ * row_norm_[t]};
  }

 private:
  int64_t tokens_;
  std::vector<Acc> reversed_powers_;
  std::vector<Acc> row_norm_;
  Acc scale_;
};

}  // namespace

template <typename Acc>
void normalized_parallel_forward(const HeadInputs<Acc>& in, const HeadOutputs<Acc>& out) {
  weighted_rows_forward<false>(in, in.tokens, /*normalize=*/true, GammaRows<Acc>(in), out);
}

template <typename Acc>
void normalized_parallel_backward(const HeadInputs<Acc>& in, const HeadGradients<Acc>& grad) {
  weighted_rows_backward<false>(in, in.tokens, /*normalize=*/true, GammaRows<Acc>(in), grad);
  if (grad.grad_initial_state) {
    std::fill(grad.grad_initial_state, grad.grad_initial_state + in.head_dim * in.head_dim_v, Acc(0));
  }
}

template void normalized_parallel_forward<float>(const HeadInputs<float>&, const HeadOutputs<float>&);
template void normalized_parallel_forward<double>(const HeadInputs<double>&, const HeadOutputs<double>&);
template void normalized_parallel_backward<float>(const HeadInputs<float>&, const HeadGradients<float>&);
template void normalized_parallel_backward<double>(const HeadInputs<double>&, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
