// Numerical robustness of retention (docs/reliability.md, "Numerical robustness"): a decay close to 1
// over long sequences (the state sums thousands of terms it barely forgets), decays whose powers
// underflow to zero, and a decay so small that only the diagonal survives. Every form (parallel,
// chunkwise, recurrent) of the CPU backend, forward and backward, against the float64 reference
// (cpu/retention_reference.hpp) run on the same values. The CUDA backend has no retention kernels
// yet; tests/python/test_numerical_robustness.py skips its CUDA cases with the library's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "attnkit/retention.hpp"
#include "cpu/retention_reference.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using namespace retention_test;

constexpr RetentionMode kModes[] = {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent};

std::string mode_name(RetentionMode mode) {
  return mode == RetentionMode::parallel ? "parallel" : mode == RetentionMode::chunkwise ? "chunkwise" : "recurrent";
}

RunSettings settings(RetentionMode mode, bool normalize = false) {
  RunSettings s;
  s.mode = mode;
  s.chunk_size = 64;
  s.want_final_state = !normalize;
  s.normalize = normalize;
  return s;
}

// The recurrent form multiplies the state by gamma rounded to the accumulator once per token, so its
// decay over T tokens is off by T * |rounded(gamma) / gamma - 1|, relative: up to T * 2^-25 in fp32
// (5.4e-5 at T = 4096 and gamma = 1 - 1e-6, where old tokens still count). The other forms take every
// power from std::pow in double and round once.
double recurrent_drift(const RetentionCase& c) {
  double drift = 0.0;
  for (double g : c.gamma) {
    const double rounded = c.dtype == DType::f64 ? g : static_cast<double>(static_cast<float>(g));
    drift = std::max(drift, static_cast<double>(c.shape.tokens) * std::abs(rounded / g - 1.0));
  }
  return drift;
}

double tolerance(const RetentionCase& c, RetentionMode mode) {
  const double base = c.dtype == DType::f64 ? 1e-12 : 1e-5;
  return mode == RetentionMode::recurrent ? base + recurrent_drift(c) : base;
}

// The float64 reference of a case: its values widened to f64, through the literal definition.
ForwardResult reference_forward(const RetentionCase& c, bool normalize = false) {
  const RetentionCase exact = converted_case(c, DType::f64);
  const RetentionShape& s = c.shape;
  Buffer out = make_tensor(DType::f64, {s.batch, s.tokens, s.heads, s.dv});
  Buffer final_state = make_tensor(DType::f64, {s.batch, s.heads, s.dk, s.dv});
  RetentionForward p;
  p.q = exact.q.view, p.k = exact.k.view, p.v = exact.v.view, p.out = out.view;
  if (c.has_initial_state) p.initial_state = exact.initial_state.view;
  if (!normalize) p.final_state = final_state.view;
  p.gamma = c.gamma, p.scale = c.scale, p.normalize = normalize;
  cpu::reference::retention_forward(p);
  return {values(out.view), normalize ? std::vector<double>{} : values(final_state.view)};
}

BackwardResult reference_backward(const RetentionCase& c, const Buffer& grad_out, const Buffer& grad_final_state) {
  const RetentionCase exact = converted_case(c, DType::f64);
  const Buffer grad_out_exact = converted(grad_out, DType::f64);
  const Buffer grad_state_exact = converted(grad_final_state, DType::f64);
  const RetentionShape& s = c.shape;
  Buffer gq = make_tensor(DType::f64, {s.batch, s.tokens, s.heads, s.dk});
  Buffer gk = make_tensor(DType::f64, {s.batch, s.tokens, s.heads, s.dk});
  Buffer gv = make_tensor(DType::f64, {s.batch, s.tokens, s.heads, s.dv});
  Buffer gs = make_tensor(DType::f64, {s.batch, s.heads, s.dk, s.dv});
  RetentionBackward p;
  p.q = exact.q.view, p.k = exact.k.view, p.v = exact.v.view, p.grad_out = grad_out_exact.view;
  p.initial_state = exact.initial_state.view, p.grad_final_state = grad_state_exact.view;
  p.grad_q = gq.view, p.grad_k = gk.view, p.grad_v = gv.view, p.grad_initial_state = gs.view;
  p.gamma = c.gamma, p.scale = c.scale;
  cpu::reference::retention_backward(p);
  return {values(gq.view), values(gk.view), values(gv.view), values(gs.view)};
}

// One head per decay; q in [-1, 1], k and v in [0, 1]: no cancellation, so with gamma near 1 the
// state and the outputs grow with T.
RetentionCase long_case(int64_t tokens, std::vector<double> gamma, DType dtype, uint64_t seed) {
  RetentionCase c = make_case({1, tokens, static_cast<int64_t>(gamma.size()), 4, 4}, dtype, seed, true);
  fill_random(c.k, seed + 10, 0.0, 1.0);
  fill_random(c.v, seed + 11, 0.0, 1.0);
  c.gamma = std::move(gamma);
  return c;
}

void expect_forward_matches_reference(const RetentionCase& c) {
  const ForwardResult expected = reference_forward(c);
  for (RetentionMode mode : kModes) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " " + mode_name(mode));
    const ForwardResult r = run_forward(c, settings(mode));
    EXPECT_TRUE(all_finite(r.out) && all_finite(r.final_state));
    EXPECT_LE(relative_l2(r.out, expected.out), tolerance(c, mode));
    EXPECT_LE(relative_l2(r.final_state, expected.final_state), tolerance(c, mode));
  }
}

TEST(NumericalRobustnessRetention, DecayCloseToOneOverLongSequencesMatchesTheReference) {
  // 1 - 2^-12 is exact in fp32; 1 - 1e-6 is not (the recurrent form's drift, 5.4e-5 here).
  expect_forward_matches_reference(long_case(4096, {1.0 - 1e-6, 1.0 - 0x1p-12}, DType::f32, 3));
}

TEST(NumericalRobustnessRetention, DecayPowersUnderflowingToZeroMatchTheReference) {
  // In fp32 0.5^t is subnormal from t = 127 and 0 from t = 150, 1e-3^t from t = 13 and t = 16; in
  // fp64 from t = 1023 / 1075 and t = 103 / 108.
  expect_forward_matches_reference(long_case(2048, {0.5, 1e-3}, DType::f32, 5));
  expect_forward_matches_reference(long_case(2048, {0.5, 1e-3}, DType::f64, 7));
}

TEST(NumericalRobustnessRetention, BackwardWithDecaysAtBothExtremesMatchesTheReference) {
  RetentionCase c = long_case(1024, {1.0 - 1e-6, 1e-3}, DType::f32, 9);
  Buffer grad_out = make_tensor(DType::f32, {1, 1024, 2, 4});
  Buffer grad_state = make_tensor(DType::f32, {1, 2, 4, 4});
  fill_random(grad_out, 10), fill_random(grad_state, 11);
  const BackwardResult expected = reference_backward(c, grad_out, grad_state);
  for (RetentionMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    const BackwardResult r = run_backward(c, settings(mode), grad_out, &grad_state, true);
    EXPECT_LE(relative_l2(r.grad_q, expected.grad_q), tolerance(c, mode));
    EXPECT_LE(relative_l2(r.grad_k, expected.grad_k), tolerance(c, mode));
    EXPECT_LE(relative_l2(r.grad_v, expected.grad_v), tolerance(c, mode));
    EXPECT_LE(relative_l2(r.grad_initial_state, expected.grad_initial_state), tolerance(c, mode));
  }
}

// Decay rows divided by sqrt of sums that reach ~T (gamma near 1) or stay ~2 (gamma = 0.5).
TEST(NumericalRobustnessRetention, NormalizedFormWithDecayCloseToOneMatchesTheReference) {
  RetentionCase c = long_case(1024, {1.0 - 1e-6, 0.5}, DType::f32, 13);
  c.has_initial_state = false;
  const ForwardResult r = run_forward(c, settings(RetentionMode::parallel, true));
  EXPECT_TRUE(all_finite(r.out));
  EXPECT_LE(relative_l2(r.out, reference_forward(c, true).out), 1e-5);
}

// gamma = 1e-30: gamma^2 = 1e-60 is 0 in fp32 and gamma^11 in fp64, so o_t = scale (q_t . k_t) v_t up to
// terms 1e-30 times smaller.
TEST(NumericalRobustnessRetention, DecaySoSmallThatOnlyTheDiagonalSurvives) {
  for (DType dtype : {DType::f32, DType::f64}) {
    RetentionCase c = make_case({2, 300, 1, 8, 8}, dtype, 17, true);
    c.gamma = {1e-30};
    const std::vector<double> q = values(c.q.view), k = values(c.k.view), v = values(c.v.view);
    std::vector<double> diagonal;
    for (std::size_t row = 0; row < 2 * 300; ++row) {
      const double qk = std::inner_product(q.begin() + row * 8, q.begin() + row * 8 + 8, k.begin() + row * 8, 0.0);
      for (std::size_t x = 0; x < 8; ++x) diagonal.push_back(qk * v[row * 8 + x] / std::sqrt(8.0));
    }
    for (RetentionMode mode : kModes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + mode_name(mode));
      EXPECT_LE(relative_l2(run_forward(c, settings(mode)).out, diagonal), dtype == DType::f32 ? 1e-6 : 1e-14);
    }
  }
}

}  // namespace
}  // namespace attnkit
