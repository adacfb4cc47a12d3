// CPU retention, backward: each form's gradients equal central finite differences of the forward in
// f64 (through q, k, v, the initial state and the final state), the forms agree in f32, the
// reference agrees, and every gradient is fully written.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "attnkit/retention.hpp"
#include "cpu/retention_reference.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using namespace retention_test;

constexpr RetentionShape kSmallShape{2, 9, 2, 3, 4};

// loss = sum(out * weight_out) + sum(final_state * weight_state) with fixed random weights, so that
// grad_out = weight_out and grad_final_state = weight_state.
struct Loss {
  Buffer weight_out, weight_state;
  RunSettings settings;
  bool with_state;

  double operator()(const RetentionCase& c) const {
    const ForwardResult r = run_forward(c, settings);
    double loss = dot(r.out, values(weight_out.view));
    if (with_state) loss += dot(r.final_state, values(weight_state.view));
    return loss;
  }
};

Loss make_loss(const RetentionCase& c, RunSettings settings, bool with_state, uint64_t seed) {
  const RetentionShape s = c.shape;
  settings.want_final_state = with_state;
  Loss loss{make_tensor(c.dtype, {s.batch, s.tokens, s.heads, s.dv}),
            make_tensor(state_dtype_for(c.dtype), {s.batch, s.heads, s.dk, s.dv}), settings, with_state};
  fill_random(loss.weight_out, seed);
  fill_random(loss.weight_state, seed + 1);
  return loss;
}

// d loss / d x for every element of `x`, by central differences.
std::vector<double> numerical_gradient(RetentionCase& c, Buffer& x, const Loss& loss, double step) {
  std::vector<double> grad(static_cast<std::size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double original = get(x.view, i);
    set(x.view, i, original + step);
    const double up = loss(c);
    set(x.view, i, original - step);
    const double down = loss(c);
    set(x.view, i, original);
    grad[i] = (up - down) / (2.0 * step);
  }
  return grad;
}

void expect_gradients_match_finite_differences(RunSettings settings, bool with_state, double tolerance) {
  RetentionCase c = make_case(kSmallShape, DType::f64, 101, with_state);
  c.gamma = {0.8, 0.95};
  const Loss loss = make_loss(c, settings, with_state, 202);
  const BackwardResult analytic =
      run_backward(c, settings, loss.weight_out, with_state ? &loss.weight_state : nullptr, with_state);
  const double step = 1e-6;
  EXPECT_LE(relative_l2(analytic.grad_q, numerical_gradient(c, c.q, loss, step)), tolerance);
  EXPECT_LE(relative_l2(analytic.grad_k, numerical_gradient(c, c.k, loss, step)), tolerance);
  EXPECT_LE(relative_l2(analytic.grad_v, numerical_gradient(c, c.v, loss, step)), tolerance);
  if (with_state) {
    EXPECT_LE(relative_l2(analytic.grad_initial_state, numerical_gradient(c, c.initial_state, loss, step)), tolerance);
  }
}

RunSettings mode_settings(RetentionMode mode, int64_t chunk = 4) {
  RunSettings s;
  s.mode = mode;
  s.chunk_size = chunk;
  return s;
}

TEST(CpuRetention, ParallelBackwardMatchesFiniteDifferences) {
  expect_gradients_match_finite_differences(mode_settings(RetentionMode::parallel), true, 1e-7);
}

TEST(CpuRetention, ChunkwiseBackwardMatchesFiniteDifferences) {
  expect_gradients_match_finite_differences(mode_settings(RetentionMode::chunkwise, 4), true, 1e-7);
}

TEST(CpuRetention, RecurrentBackwardMatchesFiniteDifferences) {
  expect_gradients_match_finite_differences(mode_settings(RetentionMode::recurrent), true, 1e-7);
}

TEST(CpuRetention, BackwardWithoutStateMatchesFiniteDifferences) {
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)));
    expect_gradients_match_finite_differences(mode_settings(mode, 5), false, 1e-7);
  }
}

TEST(CpuRetention, NormalizedBackwardMatchesFiniteDifferences) {
  RunSettings s = mode_settings(RetentionMode::parallel);
  s.normalize = true;
  expect_gradients_match_finite_differences(s, false, 1e-6);
}

TEST(CpuRetention, NormalizedBackwardDifferentiatesTheClampedRowSum) {
  // Large scores push every row's absolute sum above 1, so the denominator is active everywhere and
  // a gradient that treated it as a constant (RetNet's detach) would differ.
  RunSettings s = mode_settings(RetentionMode::parallel);
  s.normalize = true;
  RetentionCase c = make_case(kSmallShape, DType::f64, 111, false);
  c.scale = 4.0;
  const Loss loss = make_loss(c, s, false, 222);
  const BackwardResult analytic = run_backward(c, s, loss.weight_out, nullptr, false);
  EXPECT_LE(relative_l2(analytic.grad_q, numerical_gradient(c, c.q, loss, 1e-6)), 1e-6);
  EXPECT_LE(relative_l2(analytic.grad_k, numerical_gradient(c, c.k, loss, 1e-6)), 1e-6);
}

TEST(CpuRetention, BackwardFormsAgreeInF32WithPartialLastChunk) {
  RetentionCase c = make_case({2, 37, 3, 8, 5}, DType::f32, 121, true);
  Buffer grad_out = make_tensor(DType::f32, {2, 37, 3, 5});
  Buffer grad_state = make_tensor(DType::f32, {2, 3, 8, 5});
  fill_random(grad_out, 122), fill_random(grad_state, 123);
  const BackwardResult parallel = run_backward(c, mode_settings(RetentionMode::parallel), grad_out, &grad_state, true);
  for (RunSettings s : {mode_settings(RetentionMode::chunkwise, 8), mode_settings(RetentionMode::chunkwise, 16),
                        mode_settings(RetentionMode::chunkwise, 64), mode_settings(RetentionMode::recurrent)}) {
    SCOPED_TRACE("mode " + std::to_string(static_cast<int>(s.mode)) + " chunk " + std::to_string(s.chunk_size));
    const BackwardResult other = run_backward(c, s, grad_out, &grad_state, true);
    EXPECT_LE(relative_l2(other.grad_q, parallel.grad_q), 1e-5);
    EXPECT_LE(relative_l2(other.grad_k, parallel.grad_k), 1e-5);
    EXPECT_LE(relative_l2(other.grad_v, parallel.grad_v), 1e-5);
    EXPECT_LE(relative_l2(other.grad_initial_state, parallel.grad_initial_state), 1e-5);
  }
}

void expect_reference_backward_matches(bool normalize) {
  RetentionCase c = make_case({2, 11, 2, 5, 3}, DType::f64, 131, !normalize);
  Buffer grad_out = make_tensor(DType::f64, {2, 11, 2, 3});
  Buffer grad_state = make_tensor(DType::f64, {2, 2, 5, 3});
  fill_random(grad_out, 132), fill_random(grad_state, 133);
  RunSettings s = mode_settings(RetentionMode::parallel);
  s.normalize = normalize;
  const BackwardResult fast = run_backward(c, s, grad_out, normalize ? nullptr : &grad_state, !normalize);

  Buffer gq = make_tensor(DType::f64, {2, 11, 2, 5}), gk = make_tensor(DType::f64, {2, 11, 2, 5});
  Buffer gv = make_tensor(DType::f64, {2, 11, 2, 3}), gs = make_tensor(DType::f64, {2, 2, 5, 3});
  for (Buffer* b : {&gq, &gk, &gv, &gs}) poison_nan(*b);
  RetentionBackward p;
  p.q = c.q.view, p.k = c.k.view, p.v = c.v.view, p.grad_out = grad_out.view;
  p.grad_q = gq.view, p.grad_k = gk.view, p.grad_v = gv.view;
  if (!normalize) {
    p.initial_state = c.initial_state.view;
    p.grad_final_state = grad_state.view;
    p.grad_initial_state = gs.view;
  }
  p.mode = RetentionMode::parallel, p.normalize = normalize;
  cpu::reference::retention_backward(p);
  EXPECT_LE(relative_l2(values(gq.view), fast.grad_q), 1e-12);
  EXPECT_LE(relative_l2(values(gk.view), fast.grad_k), 1e-12);
  EXPECT_LE(relative_l2(values(gv.view), fast.grad_v), 1e-12);
  if (!normalize) {
    EXPECT_LE(relative_l2(values(gs.view), fast.grad_initial_state), 1e-12);
  }
}

TEST(CpuRetention, ReferenceBackwardMatchesParallelBackward) { expect_reference_backward_matches(false); }

TEST(CpuRetention, ReferenceNormalizedBackwardMatchesParallelBackward) { expect_reference_backward_matches(true); }

TEST(CpuRetention, GradientsAreFullyWrittenThroughStridedViews) {
  RetentionCase c = make_case({3, 13, 2, 5, 9}, DType::bf16, 141, true, /*pad=*/3);
  Buffer grad_out = make_tensor(DType::bf16, {3, 13, 2, 9}, 2);
  Buffer grad_state = make_tensor(DType::f32, {3, 2, 5, 9}, 1);
  fill_random(grad_out, 142), fill_random(grad_state, 143);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    RunSettings s = mode_settings(mode, 4);
    s.output_pad = 3;
    const BackwardResult r = run_backward(c, s, grad_out, &grad_state, true);
    EXPECT_EQ(r.grad_q.size(), 3u * 13 * 2 * 5);
    EXPECT_TRUE(all_finite(r.grad_q));
    EXPECT_TRUE(all_finite(r.grad_k));
    EXPECT_TRUE(all_finite(r.grad_v));
    EXPECT_TRUE(all_finite(r.grad_initial_state));
  }
}

TEST(CpuRetention, Bf16BackwardMatchesF64WithinTolerance) {
  RetentionCase low = make_case({2, 21, 2, 8, 6}, DType::bf16, 151, true);
  Buffer grad_out = make_tensor(DType::bf16, {2, 21, 2, 6});
  Buffer grad_state = make_tensor(DType::f32, {2, 2, 8, 6});
  fill_random(grad_out, 152), fill_random(grad_state, 153);
  const RetentionCase exact = converted_case(low, DType::f64);
  const Buffer grad_out_exact = converted(grad_out, DType::f64);
  const Buffer grad_state_exact = converted(grad_state, DType::f64);
  const BackwardResult expected =
      run_backward(exact, mode_settings(RetentionMode::parallel), grad_out_exact, &grad_state_exact, true);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    const BackwardResult r = run_backward(low, mode_settings(mode, 8), grad_out, &grad_state, true);
    EXPECT_LE(relative_l2(r.grad_q, expected.grad_q), 1.5e-2);
    EXPECT_LE(relative_l2(r.grad_k, expected.grad_k), 1.5e-2);
    EXPECT_LE(relative_l2(r.grad_v, expected.grad_v), 1.5e-2);
    EXPECT_LE(relative_l2(r.grad_initial_state, expected.grad_initial_state), 1e-5);
  }
}

}  // namespace
}  // namespace attnkit
