// CPU GEMM against a triple-loop double reference: every transpose and memory layout per operand,
// alpha and beta (beta = 0 never reads C), batching with strides and batch-1 broadcast, sizes that
// straddle the blocking (1, 7, 65, 129, depth past one KC block), and f16/bf16/f64 tolerances.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/gemm.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/gemm_reference.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using namespace retention_test;

enum class Layout { row_major, col_major };

// A [batch?, rows, cols] matrix in the given layout, `pad` spare elements per leading dimension and
// per batch, so that neither layout is contiguous.
Buffer make_matrix(DType dtype, int64_t batch, int64_t rows, int64_t cols, Layout layout, int64_t pad = 3) {
  const int64_t ld = (layout == Layout::row_major ? cols : rows) + pad;
  const int64_t row_stride = layout == Layout::row_major ? ld : 1;
  const int64_t col_stride = layout == Layout::row_major ? 1 : ld;
  const int64_t batch_stride = ld * (layout == Layout::row_major ? rows : cols) + pad;
  if (batch == 0) return make_strided(dtype, {rows, cols}, {row_stride, col_stride});
  return make_strided(dtype, {batch, rows, cols}, {batch_stride, row_stride, col_stride});
}

struct GemmCase {
  GemmProblem problem;
  Buffer a, b, c;
};

// Product of op(A) [M, K] and op(B) [K, N]; batch 0 means rank-2 views.
struct GemmSpec {
  int64_t m, n, k;
  bool transpose_a = false, transpose_b = false;
  Layout layout_a = Layout::row_major, layout_b = Layout::row_major, layout_c = Layout::row_major;
  int64_t batch_a = 0, batch_b = 0, batch_c = 0;
  double alpha = 1.0, beta = 0.0;
};

GemmCase make_gemm(const GemmSpec& s, DType dtype, uint64_t seed) {
  GemmCase g{GemmProblem{},
             make_matrix(dtype, s.batch_a, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k, s.layout_a),
             make_matrix(dtype, s.batch_b, s.transpose_b ? s.n : s.k, s.transpose_b ? s.k : s.n, s.layout_b),
             make_matrix(dtype, s.batch_c, s.m, s.n, s.layout_c)};
  fill_random(g.a, seed), fill_random(g.b, seed + 1), fill_random(g.c, seed + 2);
  g.problem.a = g.a.view, g.problem.b = g.b.view, g.problem.c = g.c.view;
  g.problem.transpose_a = s.transpose_a, g.problem.transpose_b = s.transpose_b;
  g.problem.alpha = s.alpha, g.problem.beta = s.beta;
  return g;
}

// Runs the CPU GEMM and the reference on identical copies of C; returns {cpu, reference} values.
std::pair<std::vector<double>, std::vector<double>> run_both(GemmCase& g) {
  Buffer c_reference = g.c;  // same bytes, same strides
  c_reference.view.data = c_reference.bytes.data();
  GemmProblem reference_problem = g.problem;
  reference_problem.c = c_reference.view;
  cpu::reference::gemm(reference_problem);
  cpu::gemm(g.problem, RunOptions{});
  return {values(g.c.view), values(c_reference.view)};
}

std::string describe(const GemmSpec& s) {
  auto name = [](Layout l) { return l == Layout::row_major ? "row" : "col"; };
  std::ostringstream text;
  text << "M" << s.m << " N" << s.n << " K" << s.k << " ta" << s.transpose_a << " tb" << s.transpose_b
       << " A:" << name(s.layout_a) << " B:" << name(s.layout_b) << " C:" << name(s.layout_c);
  return text.str();
}

TEST(CpuGemm, EveryTransposeAndLayoutMatchesReference) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Layout la : {Layout::row_major, Layout::col_major})
        for (Layout lb : {Layout::row_major, Layout::col_major})
          for (Layout lc : {Layout::row_major, Layout::col_major}) {
            const GemmSpec spec{37, 70, 300, ta, tb, la, lb, lc};
            SCOPED_TRACE(describe(spec));
            GemmCase g = make_gemm(spec, DType::f32, 7);
            poison_nan(g.c);  // beta = 0
            const auto [got, expected] = run_both(g);
            EXPECT_LE(relative_l2(got, expected), 1e-5);
          }
}

TEST(CpuGemm, OddSizesMatchReference) {
  for (int64_t m : {1, 7, 65, 129})
    for (int64_t n : {1, 7, 65, 129})
      for (int64_t k : {1, 7, 129}) {
        const GemmSpec spec{m, n, k};
        SCOPED_TRACE(describe(spec));
        GemmCase g = make_gemm(spec, DType::f32, 11);
        poison_nan(g.c);
        const auto [got, expected] = run_both(g);
        EXPECT_LE(relative_l2(got, expected), 1e-5);
      }
}

TEST(CpuGemm, AlphaAndBetaScaleProductAndC) {
  GemmSpec spec{65, 33, 129};
  spec.alpha = 0.7, spec.beta = -1.3;
  spec.layout_c = Layout::col_major;
  GemmCase g = make_gemm(spec, DType::f32, 13);
  const auto [got, expected] = run_both(g);
  EXPECT_LE(relative_l2(got, expected), 1e-5);
}

TEST(CpuGemm, BetaZeroIgnoresNanInC) {
  GemmSpec spec{40, 50, 60};
  spec.alpha = 1.5;
  GemmCase g = make_gemm(spec, DType::f32, 17);
  poison_nan(g.c);
  const auto [got, expected] = run_both(g);
  EXPECT_TRUE(all_finite(got));
  EXPECT_LE(relative_l2(got, expected), 1e-5);
}

TEST(CpuGemm, AlphaZeroReadsNeitherAnorB) {
  GemmSpec spec{20, 30, 40};
  spec.alpha = 0.0, spec.beta = 2.0;
  GemmCase g = make_gemm(spec, DType::f32, 19);
  poison_nan(g.a), poison_nan(g.b);
  const std::vector<double> c_before = values(g.c.view);
  cpu::gemm(g.problem, RunOptions{});
  std::vector<double> doubled(c_before);
  for (double& x : doubled) x *= 2.0;
  EXPECT_EQ(values(g.c.view), doubled);
}

TEST(CpuGemm, EmptyDepthGivesBetaTimesC) {
  GemmSpec spec{9, 11, 0};
  spec.beta = 0.5;
  GemmCase g = make_gemm(spec, DType::f32, 23);
  const auto [got, expected] = run_both(g);
  EXPECT_EQ(got, expected);
}

TEST(CpuGemm, InconsistentExtentsThrowBeforeWritingC) {
  GemmCase g = make_gemm(GemmSpec{5, 6, 7}, DType::f32, 27);
  Buffer wrong_b = make_matrix(DType::f32, 0, 8, 6, Layout::row_major);  // K = 8, but op(A) has K = 7
  g.problem.b = wrong_b.view;
  poison_nan(g.c);
  EXPECT_THROW(cpu::gemm(g.problem, RunOptions{}), Error);
  for (double x : values(g.c.view)) EXPECT_TRUE(std::isnan(x));
}

TEST(CpuGemm, BatchedStridedOperandsMatchReference) {
  GemmSpec spec{33, 47, 70, false, true, Layout::row_major, Layout::col_major, Layout::row_major, 5, 5, 5};
  spec.beta = 0.25;
  GemmCase g = make_gemm(spec, DType::f32, 29);
  const auto [got, expected] = run_both(g);
  EXPECT_LE(relative_l2(got, expected), 1e-5);
}

TEST(CpuGemm, BatchOfOneBroadcastsOverTheBatch) {
  for (auto [batch_a, batch_b] : {std::pair<int64_t, int64_t>{1, 4}, {4, 1}, {0, 4}}) {
    SCOPED_TRACE(testing::Message() << "batch a " << batch_a << " b " << batch_b);
    GemmSpec spec{21,      19,      35, true, false, Layout::row_major, Layout::row_major, Layout::col_major,
                  batch_a, batch_b, 4};
    GemmCase g = make_gemm(spec, DType::f32, 31);
    poison_nan(g.c);
    const auto [got, expected] = run_both(g);
    EXPECT_LE(relative_l2(got, expected), 1e-5);
  }
}

TEST(CpuGemm, LargeThreadedProblemMatchesReference) {
  GemmCase g = make_gemm(GemmSpec{300, 530, 270}, DType::f32, 37);
  poison_nan(g.c);
  const auto [got, expected] = run_both(g);
  EXPECT_LE(relative_l2(got, expected), 1e-5);
}

void expect_dtype_within(DType dtype, double tolerance) {
  GemmSpec spec{65, 129, 300, false, true};
  spec.alpha = 0.5, spec.beta = 0.5;
  GemmCase g = make_gemm(spec, dtype, 41);
  const auto [got, expected] = run_both(g);  // the reference reads the same rounded inputs
  EXPECT_LE(relative_l2(got, expected), tolerance);
}

TEST(CpuGemm, F16WithinTolerance) { expect_dtype_within(DType::f16, 5e-3); }

TEST(CpuGemm, Bf16WithinTolerance) { expect_dtype_within(DType::bf16, 1.5e-2); }

TEST(CpuGemm, F64MatchesReferenceTightly) { expect_dtype_within(DType::f64, 1e-13); }

TEST(CpuGemm, F16IsRoundedOnceFromAFullDepthSum) {
  // A long depth (several KC blocks) of positive terms: each f16 result must be the exact product
  // rounded once, i.e. within half an f16 ulp (2^-11 relative); rounding partial sums to f16 between
  // depth blocks would break that bound.
  GemmSpec spec{8, 8, 2000};
  GemmCase g = make_gemm(spec, DType::f16, 43);
  fill_random(g.a, 44, 0.0, 1.0), fill_random(g.b, 45, 0.0, 1.0);
  cpu::gemm(g.problem, RunOptions{});
  Buffer a64 = converted(g.a, DType::f64), b64 = converted(g.b, DType::f64), c64 = make_tensor(DType::f64, {8, 8});
  GemmProblem exact;
  exact.a = a64.view, exact.b = b64.view, exact.c = c64.view;
  cpu::reference::gemm(exact);
  const std::vector<double> got = values(g.c.view), expected = values(c64.view);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - expected[i]), std::ldexp(std::abs(expected[i]), -11) * 1.0001) << "element " << i;
  }
}

}  // namespace
TEST(CpuGemm, ReferenceWritesNothingForAnEmptyBatchOfC) {
  // C's batch 0 next to operands of batch 1 (they broadcast to it): the reference must not write C's
  // nonexistent first matrix (it took the batch as the largest of the three).
  std::vector<float> a(6, 1.f), b(12, 1.f), c_guard(8, 7.f);
  const int64_t a_extents[] = {1, 2, 3}, b_extents[] = {1, 3, 4}, c_extents[] = {0, 2, 4};
  GemmProblem problem;
  problem.a = make_view(a.data(), DType::f32, 3, a_extents);
  problem.b = make_view(b.data(), DType::f32, 3, b_extents);
  problem.c = make_view(c_guard.data(), DType::f32, 3, c_extents);
  cpu::reference::gemm(problem);
  for (float x : c_guard) EXPECT_EQ(x, 7.f) << "the reference wrote into a C without elements";
}

}  // namespace attnkit
