// The parallel form of retention over an explicit decay matrix, for one (batch, head) slice:
//   s[t, m] = scale * D[t, m] * (q_t . k_m)              for every key m < Tk (D decides which count)
//   a_t = sum_m |s[t, m]|,  n_t = max(a_t, 1) with normalize (RetNet's score normalisation), else 1
//   o_t = sum_m (s[t, m] / n_t) v_m
// D is used as given: RetNet's decay-row scaling (rows divided by sqrt of their sum) belongs to the matrix
// the caller builds. Query row t's weights are row t of D with factor scale; a zero in D masks the key (it
// does not count even where q, k or v are not finite). The rows, the normaliser and the backward (D a
// constant) are retention_weighted_rows.hpp's.
#include "cpu/retention_head.hpp"
#include "cpu/retention_weighted_rows.hpp"

namespace attnkit::cpu::retention {
namespace {

// Row t of D, all Tk keys.
template <typename Acc>
struct DecayMatrixRows {
  const Acc* decay;
  int64_t tokens_k;
  Acc scale;

  WeightRow<Acc> operator()(int64_t t) const { return {decay + t * tokens_k, tokens_k, scale}; }
};

template <typename Acc>
DecayMatrixRows<Acc> decay_matrix_rows(const HeadInputs<Acc>& in) {
  return {in.decay, in.tokens_k, static_cast<Acc>(in.scale)};
}

}  // namespace

template <typename Acc>
void decay_matrix_forward(const HeadInputs<Acc>& in, bool normalize, const HeadOutputs<Acc>& out) {
  weighted_rows_forward<true>(in, in.tokens_k, normalize, decay_matrix_rows(in), out);
}

template <typename Acc>
void decay_matrix_backward(const HeadInputs<Acc>& in, bool normalize, const HeadGradients<Acc>& grad) {
  weighted_rows_backward<true>(in, in.tokens_k, normalize, decay_matrix_rows(in), grad);
}

template void decay_matrix_forward<float>(const HeadInputs<float>&, bool, const HeadOutputs<float>&);
template void decay_matrix_forward<double>(const HeadInputs<double>&, bool, const HeadOutputs<double>&);
template void decay_matrix_backward<float>(const HeadInputs<float>&, bool, const HeadGradients<float>&);
template void decay_matrix_backward<double>(const HeadInputs<double>&, bool, const HeadGradients<double>&);

}  // namespace attnkit::cpu::retention
