// CPU retention, forward: every form equals the definition, the forms agree with each other, the
// state carries a sequence across calls, and dtypes, strides and outputs behave.
#include <gtest/gtest.h>

#include <vector>

#include "attnkit/retention.hpp"
#include "cpu/retention_reference.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using namespace retention_test;

constexpr RetentionShape kOddShape{2, 37, 3, 8, 5};

RunSettings settings_for(RetentionMode mode, int64_t chunk = 8, bool want_final_state = false) {
  RunSettings s;
  s.mode = mode;
  s.chunk_size = chunk;
  s.want_final_state = want_final_state;
  return s;
}

void expect_form_matches_definition_in_f64(RetentionMode mode, int64_t chunk) {
  RetentionCase c = make_case(kOddShape, DType::f64, 11, /*with_initial_state=*/true);
  const DenseRetention dense = dense_of(c);
  const ForwardResult r = run_forward(c, settings_for(mode, chunk, true));
  EXPECT_LE(relative_l2(r.out, retention_definition(dense)), 1e-12);
  EXPECT_LE(relative_l2(r.final_state, final_state_definition(dense)), 1e-12);
}

TEST(CpuRetention, DefaultGammaIsOneMinusTwoToMinusFiveMinusHead) {
  const std::vector<double> gamma = default_retention_gamma(3);
  ASSERT_EQ(gamma.size(), 3u);
  EXPECT_EQ(gamma[0], 1.0 - 1.0 / 32.0);
  EXPECT_EQ(gamma[1], 1.0 - 1.0 / 64.0);
  EXPECT_EQ(gamma[2], 1.0 - 1.0 / 128.0);
}

TEST(CpuRetention, DefinitionMatchesHandComputedValues) {
  // T = 2, H = 1, Dk = Dv = 1: o_0 = s q0 k0 v0, o_1 = s (g q1 k0 v0 + q1 k1 v1); final = g k0 v0 + k1 v1.
  RetentionCase c = make_case({1, 2, 1, 1, 1}, DType::f64, 3, false);
  const double q0 = 0.5, q1 = -2.0, k0 = 3.0, k1 = 0.25, v0 = 1.5, v1 = -4.0, g = 0.75, s = 0.2;
  set(c.q.view, 0, q0), set(c.q.view, 1, q1), set(c.k.view, 0, k0), set(c.k.view, 1, k1);
  set(c.v.view, 0, v0), set(c.v.view, 1, v1);
  c.gamma = {g};
  c.scale = s;
  const std::vector<double> expected_out{s * q0 * k0 * v0, s * (g * q1 * k0 * v0 + q1 * k1 * v1)};
  EXPECT_LE(relative_l2(retention_definition(dense_of(c)), expected_out), 1e-15);
  EXPECT_LE(relative_l2(final_state_definition(dense_of(c)), {g * k0 * v0 + k1 * v1}), 1e-15);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    EXPECT_LE(relative_l2(run_forward(c, settings_for(mode, 1)).out, expected_out), 1e-15);
  }
}

TEST(CpuRetention, ParallelMatchesDefinitionInF64) {
  expect_form_matches_definition_in_f64(RetentionMode::parallel, 8);
}

TEST(CpuRetention, ChunkwiseMatchesDefinitionInF64) {
  expect_form_matches_definition_in_f64(RetentionMode::chunkwise, 8);
}

TEST(CpuRetention, RecurrentMatchesDefinitionInF64) {
  expect_form_matches_definition_in_f64(RetentionMode::recurrent, 8);
}

TEST(CpuRetention, ReferenceMatchesDefinitionInF64) {
  RetentionCase c = make_case(kOddShape, DType::f64, 12, true);
  Buffer out = make_tensor(DType::f64, {2, 37, 3, 5});
  Buffer final_state = make_tensor(DType::f64, {2, 3, 8, 5});
  poison_nan(out), poison_nan(final_state);
  RetentionForward p;
  p.q = c.q.view, p.k = c.k.view, p.v = c.v.view, p.out = out.view;
  p.initial_state = c.initial_state.view, p.final_state = final_state.view;
  cpu::reference::retention_forward(p);
  EXPECT_LE(relative_l2(values(out.view), retention_definition(dense_of(c))), 1e-13);
  EXPECT_LE(relative_l2(values(final_state.view), final_state_definition(dense_of(c))), 1e-13);
}

TEST(CpuRetention, ChunkwiseMatchesParallelInF32WithPartialLastChunk) {
  RetentionCase c = make_case(kOddShape, DType::f32, 21, true);
  const ForwardResult parallel = run_forward(c, settings_for(RetentionMode::parallel, 8, true));
  for (int64_t chunk : {1, 8, 16}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const ForwardResult chunkwise = run_forward(c, settings_for(RetentionMode::chunkwise, chunk, true));
    EXPECT_LE(relative_l2(chunkwise.out, parallel.out), 1e-5);
    EXPECT_LE(relative_l2(chunkwise.final_state, parallel.final_state), 1e-5);
  }
}

TEST(CpuRetention, ChunkwiseWithChunkLongerThanSequenceMatchesParallel) {
  RetentionCase c = make_case(kOddShape, DType::f32, 22, true);
  const ForwardResult parallel = run_forward(c, settings_for(RetentionMode::parallel, 8, true));
  const ForwardResult chunkwise = run_forward(c, settings_for(RetentionMode::chunkwise, 64, true));
  EXPECT_LE(relative_l2(chunkwise.out, parallel.out), 1e-5);
  EXPECT_LE(relative_l2(chunkwise.final_state, parallel.final_state), 1e-5);
}

TEST(CpuRetention, RecurrentMatchesParallelInF32) {
  RetentionCase c = make_case(kOddShape, DType::f32, 23, true);
  const ForwardResult parallel = run_forward(c, settings_for(RetentionMode::parallel, 8, true));
  const ForwardResult recurrent = run_forward(c, settings_for(RetentionMode::recurrent, 8, true));
  EXPECT_LE(relative_l2(recurrent.out, parallel.out), 1e-5);
  EXPECT_LE(relative_l2(recurrent.final_state, parallel.final_state), 1e-5);
}

// Splits a case's tokens [0, split) and [split, T) into two cases (f32, contiguous).
std::pair<RetentionCase, RetentionCase> split_tokens(const RetentionCase& c, int64_t split) {
  const RetentionShape s = c.shape;
  RetentionCase first = make_case({s.batch, split, s.heads, s.dk, s.dv}, c.dtype, 0, c.has_initial_state);
  RetentionCase second = make_case({s.batch, s.tokens - split, s.heads, s.dk, s.dv}, c.dtype, 0, false);
  first.initial_state = converted(c.initial_state, state_dtype_for(c.dtype));
  auto copy_tokens = [&](const Buffer& from, Buffer& to, int64_t t0, int64_t width) {
    const int64_t tokens = to.view.extents[1];
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t x = 0; x < s.heads * width; ++x)
          set(to.view, (b * tokens + t) * s.heads * width + x,
              get(from.view, (b * s.tokens + t0 + t) * s.heads * width + x));
  };
  copy_tokens(c.q, first.q, 0, s.dk), copy_tokens(c.k, first.k, 0, s.dk), copy_tokens(c.v, first.v, 0, s.dv);
  copy_tokens(c.q, second.q, split, s.dk), copy_tokens(c.k, second.k, split, s.dk),
      copy_tokens(c.v, second.v, split, s.dv);
  return {std::move(first), std::move(second)};
}

TEST(CpuRetention, FinalStateCarriedIntoSecondHalfEqualsOneRun) {
  RetentionCase whole = make_case(kOddShape, DType::f32, 31, true);
  auto [first, second] = split_tokens(whole, 17);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)));
    const ForwardResult one_run = run_forward(whole, settings_for(mode, 8, true));
    const ForwardResult head = run_forward(first, settings_for(mode, 8, true));
    second.has_initial_state = true;
    second.initial_state = make_tensor(DType::f32, {2, 3, 8, 5});
    for (int64_t i = 0; i < second.initial_state.numel(); ++i) set(second.initial_state.view, i, head.final_state[i]);
    const ForwardResult tail = run_forward(second, settings_for(mode, 8, true));
    // Outputs are [B, T, H, Dv]: interleave the halves per batch before comparing.
    std::vector<double> joined;
    const int64_t row = 3 * 5;
    for (int64_t b = 0; b < 2; ++b) {
      joined.insert(joined.end(), head.out.begin() + b * 17 * row, head.out.begin() + (b + 1) * 17 * row);
      joined.insert(joined.end(), tail.out.begin() + b * 20 * row, tail.out.begin() + (b + 1) * 20 * row);
    }
    EXPECT_LE(relative_l2(joined, one_run.out), 1e-5);
    EXPECT_LE(relative_l2(tail.final_state, one_run.final_state), 1e-5);
  }
}

TEST(CpuRetention, RecurrentSingleTokenDecodeStepsReproduceTheSequence) {
  const RetentionShape shape{1, 10, 2, 6, 7};
  RetentionCase whole = make_case(shape, DType::f32, 41, true);
  const ForwardResult reference = run_forward(whole, settings_for(RetentionMode::parallel, 8, true));
  std::vector<double> decoded;
  Buffer state = converted(whole.initial_state, DType::f32);
  for (int64_t t = 0; t < shape.tokens; ++t) {
    RetentionCase step = split_tokens(whole, t).second;
    step = split_tokens(step, 1).first;  // just token t
    step.has_initial_state = true;
    step.initial_state = converted(state, DType::f32);
    const ForwardResult r = run_forward(step, settings_for(RetentionMode::recurrent, 1, true));
    decoded = concat(decoded, r.out);
    for (int64_t i = 0; i < state.numel(); ++i) set(state.view, i, r.final_state[i]);
  }
  EXPECT_LE(relative_l2(decoded, reference.out), 1e-5);
  EXPECT_LE(relative_l2(values(state.view), reference.final_state), 1e-5);
}

TEST(CpuRetention, CustomGammaAndScaleMatchDefinition) {
  RetentionCase c = make_case(kOddShape, DType::f64, 51, true);
  c.gamma = {0.5, 0.97, 0.8};
  c.scale = 0.3;
  const DenseRetention dense = dense_of(c);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    const ForwardResult r = run_forward(c, settings_for(mode, 16, true));
    EXPECT_LE(relative_l2(r.out, retention_definition(dense)), 1e-12);
    EXPECT_LE(relative_l2(r.final_state, final_state_definition(dense)), 1e-12);
  }
}

TEST(CpuRetention, EmptyGammaMeansDefaultGamma) {
  RetentionCase c = make_case(kOddShape, DType::f32, 52, false);
  const ForwardResult implicit = run_forward(c, settings_for(RetentionMode::chunkwise, 16));
  c.gamma = default_retention_gamma(kOddShape.heads);
  const ForwardResult explicit_gamma = run_forward(c, settings_for(RetentionMode::chunkwise, 16));
  EXPECT_EQ(implicit.out, explicit_gamma.out);
}

void expect_low_precision_close_to_f64(DType dtype, double tolerance) {
  RetentionCase low = make_case(kOddShape, dtype, 61, true);
  const DenseRetention exact = dense_of(converted_case(low, DType::f64));
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)));
    const ForwardResult r = run_forward(low, settings_for(mode, 16, true));
    EXPECT_LE(relative_l2(r.out, retention_definition(exact)), tolerance);
    EXPECT_LE(relative_l2(r.final_state, final_state_definition(exact)), 1e-5);  // the state stays float32
  }
}

TEST(CpuRetention, Bf16MatchesF64WithinTolerance) { expect_low_precision_close_to_f64(DType::bf16, 1.5e-2); }

TEST(CpuRetention, F16MatchesF64WithinTolerance) { expect_low_precision_close_to_f64(DType::f16, 5e-3); }

TEST(CpuRetention, OutputsAreFullyWrittenForEveryForm) {
  RetentionCase c = make_case({3, 13, 2, 5, 9}, DType::f32, 71, true, /*pad=*/3);
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    RunSettings s = settings_for(mode, 4, true);
    s.output_pad = 2;
    const ForwardResult r = run_forward(c, s);
    EXPECT_EQ(r.out.size(), 3u * 13 * 2 * 9);
    EXPECT_TRUE(all_finite(r.out));
    EXPECT_TRUE(all_finite(r.final_state));
  }
}

TEST(CpuRetention, StridedViewsGiveTheSameResultAsContiguous) {
  RetentionCase contiguous = make_case(kOddShape, DType::f32, 81, true);
  RetentionCase strided = make_case(kOddShape, DType::f32, 0, true, /*pad=*/5);
  // q is laid out heads-outer ([B, H, T, D] memory seen as [B, T, H, D]), the rest padded.
  const RetentionShape s = kOddShape;
  strided.q = make_strided(DType::f32, {s.batch, s.tokens, s.heads, s.dk},
                           {s.heads * s.tokens * s.dk, s.dk, s.tokens * s.dk, 1});
  for (auto [from, to] : {std::pair{&contiguous.q, &strided.q},
                          {&contiguous.k, &strided.k},
                          {&contiguous.v, &strided.v},
                          {&contiguous.initial_state, &strided.initial_state}}) {
    for (int64_t i = 0; i < from->numel(); ++i) set(to->view, i, get(from->view, i));
  }
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    RunSettings padded_out = settings_for(mode, 8, true);
    padded_out.output_pad = 4;
    const ForwardResult a = run_forward(contiguous, settings_for(mode, 8, true));
    const ForwardResult b = run_forward(strided, padded_out);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.final_state, b.final_state);
  }
}

TEST(CpuRetention, NormalizedParallelMatchesItsDefinition) {
  RetentionCase c = make_case({2, 29, 2, 8, 6}, DType::f64, 91, false);
  c.gamma = {0.9, 0.6};
  RunSettings s = settings_for(RetentionMode::parallel);
  s.normalize = true;
  const std::vector<double> expected = normalized_retention_definition(dense_of(c));
  EXPECT_LE(relative_l2(run_forward(c, s).out, expected), 1e-12);

  RetentionForward p;
  Buffer out = make_tensor(DType::f64, {2, 29, 2, 6});
  poison_nan(out);
  p.q = c.q.view, p.k = c.k.view, p.v = c.v.view, p.out = out.view, p.gamma = c.gamma;
  p.mode = RetentionMode::parallel, p.normalize = true;
  cpu::reference::retention_forward(p);
  EXPECT_LE(relative_l2(values(out.view), expected), 1e-12);
}

TEST(CpuRetention, NormalizedParallelInF32MatchesF64) {
  RetentionCase c = make_case({2, 29, 2, 8, 6}, DType::f32, 92, false);
  RunSettings s = settings_for(RetentionMode::parallel);
  s.normalize = true;
  const std::vector<double> expected = normalized_retention_definition(dense_of(converted_case(c, DType::f64)));
  EXPECT_LE(relative_l2(run_forward(c, s).out, expected), 1e-5);
}

}  // namespace
}  // namespace attnkit
