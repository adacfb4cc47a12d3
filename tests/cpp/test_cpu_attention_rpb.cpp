// Relative positional bias (AttentionMask::rpb, NATTEN <= 0.17 semantics) on the CPU backend:
//  - pinned to NATTEN's documented indexing: an independent brute force in this file builds each
//    query's window from NATTEN's window-start rule and reads the bias at "pb_start + ki" with NATTEN's
//    pb_start rule (for dilation 1 and for dilated windows, boundaries included);
//  - the CPU kernels against the float64 reference (forward, backward, grad_rpb) over 1-D/2-D/3-D,
//    dilation, GQA, strided views and every dtype;
//  - grad_rpb against central finite differences of the forward, and bitwise the same for any thread
//    count;
//  - validation: where a bias is allowed, its shape, dtype and gradient.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_cpu_attention_problem.hpp"
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// --- NATTEN's rules, one token dimension of length L, window K (odd), dilation d ---------------------

// First key of query i's window.
int64_t natten_window_start(int64_t i, int64_t L, int64_t K, int64_t d) {
  const int64_t nh = K / 2;
  if (d <= 1) {
    int64_t start = std::max<int64_t>(i - nh, 0);
    if (i + nh >= L) start += L - i - nh - 1;
    return start;
  }
  const int64_t group = i % d;
  const int64_t index = i / d;
  const int64_t group_length = (L - group + d - 1) / d;  // positions of the group: group, group + d, ...
  int64_t start = std::max<int64_t>(index - nh, 0);
  if (index + nh >= group_length) start += group_length - index - nh - 1;
  return start * d + group;
}

// Index into the 2K-1 bias entries of the window's first key ("pb_start"); key ki of the window reads
// entry pb_start + ki.
int64_t natten_pb_start(int64_t i, int64_t L, int64_t K, int64_t d) {
  const int64_t nh = K / 2;
  if (d <= 1) {
    int64_t pb = nh;
    if (i < nh) pb += nh - i;
    if (i + nh >= L) pb += L - i - 1 - nh;
    return pb;
  }
  if (i - nh * d < 0) return (K - 1) - i / d;
  if (i + nh * d >= L) return (L - i - 1) / d;
  return nh;
}

// out[b, i, h] = softmax_j(scale q.k_j + rpb[h, pb + kj]) v_j over NATTEN's window, 2-D tokens [H, W].
std::vector<double> natten_2d_forward(const AttentionTensors& t, int64_t K0, int64_t K1, int64_t d0, int64_t d1) {
  const AttentionCase& c = t.spec;
  const int64_t H = c.tokens[0], W = c.tokens[1], D = c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t y = 0; y < H; ++y) {
      for (int64_t x = 0; x < W; ++x) {
        for (int64_t h = 0; h < c.heads_q; ++h) {
          const int64_t sy = natten_window_start(y, H, K0, d0), sx = natten_window_start(x, W, K1, d1);
          const int64_t py = natten_pb_start(y, H, K0, d0), px = natten_pb_start(x, W, K1, d1);
          std::vector<double> scores;
          std::vector<std::pair<int64_t, int64_t>> keys;
          for (int64_t ky = 0; ky < K0; ++ky) {
            for (int64_t kx = 0; kx < K1; ++kx) {
              const int64_t jy = sy + ky * d0, jx = sx + kx * d1;
              double s = 0.0;
              for (int64_t e = 0; e < D; ++e) {
                s += element_at(t.q.view, {b, y, x, h, e}) *
                     element_at(t.k.view, {b, jy, jx, h / (c.heads_q / c.heads_kv), e});
              }
              scores.push_back(scale * s + element_at(t.rpb.view, {h, py + ky, px + kx}));
              keys.emplace_back(jy, jx);
            }
          }
          double max_score = -std::numeric_limits<double>::infinity();
          for (double s : scores) max_score = std::max(max_score, s);
          double sum = 0.0;
          for (double& s : scores) sum += (s = std::exp(s - max_score));
          for (int64_t e = 0; e < c.head_dim_v; ++e) {
            double o = 0.0;
            for (size_t j = 0; j < keys.size(); ++j) {
              o +=
                  scores[j] * element_at(t.v.view, {b, keys[j].first, keys[j].second, h / (c.heads_q / c.heads_kv), e});
            }
            out.push_back(o / sum);
          }
        }
      }
    }
  }
  return out;
}

double relative_l2_values(const std::vector<double>& a, const std::vector<double>& ref) {
  double error = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    error += (a[i] - ref[i]) * (a[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(error / norm);
}

AttentionCase rpb_case(std::vector<int64_t> tokens, AttentionMask mask, DType dtype = DType::f64) {
  AttentionCase c;
  c.tokens = std::move(tokens);
  c.mask = mask;
  c.dtype = dtype;
  c.rpb = dtype == DType::f64 ? DType::f64 : DType::f32;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 16;
  c.seed = 5;
  return c;
}

TEST(CpuAttentionRpb, ForwardFollowsNattensWindowAndBiasIndexing) {
  // 2-D, K 5x3, dilation 1 and 2: every boundary case of both rules (start, middle, end of each axis).
  for (const auto& [d0, d1] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 3}, {2, 2}}) {
    AttentionCase c = rpb_case({11, 10}, neighborhood_mask({5, 3}, {d0, d1}));
    c.heads_kv = c.heads_q;
    AttentionTensors t(c);
    t.run_forward();
    EXPECT_LE(relative_l2_values(to_doubles(t.out.view), natten_2d_forward(t, 5, 3, d0, d1)), 1e-12)
        << "dilation " << d0 << "x" << d1;
  }
}

struct RpbCase {
  const char* name;
  std::vector<int64_t> tokens;
  AttentionMask mask;
};

std::vector<RpbCase> rpb_cases() {
  return {{"na1d", {19}, neighborhood_mask({7})},
          {"na1d_dilated", {23}, neighborhood_mask({5}, {3})},
          {"na2d", {9, 11}, neighborhood_mask({5, 3}, {1, 3})},
          {"na2d_even_kernel", {8, 9}, neighborhood_mask({4, 6})},
          {"na3d", {4, 7, 6}, neighborhood_mask({3, 3, 5}, {1, 2, 1})}};
}

void expect_matches_reference(AttentionCase c, double tolerance) {
  AttentionTensors t(c);
  t.run_forward();
  t.run_reference_forward();
  EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), tolerance) << "out";
  EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), std::max(tolerance, 1e-7)) << "lse";
  t.run_backward();
  t.run_reference_backward();
  EXPECT_TRUE(all_finite(t.grad_rpb.view)) << "grad_rpb not fully written";
  EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), tolerance) << "grad_q";
  EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), tolerance) << "grad_k";
  EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), tolerance) << "grad_v";
  EXPECT_LE(relative_l2(t.grad_rpb.view, t.ref_grad_rpb.view), tolerance) << "grad_rpb";
}

TEST(CpuAttentionRpb, ForwardAndBackwardMatchTheReferenceInFloat64) {
  for (const RpbCase& r : rpb_cases()) {
    SCOPED_TRACE(r.name);
    expect_matches_reference(rpb_case(r.tokens, r.mask), 1e-12);
  }
}

TEST(CpuAttentionRpb, StridedViewsAndReducedPrecisionMatchTheReference) {
  for (const auto& [dtype, tolerance] : {std::pair{DType::f32, 1e-5}, {DType::f16, 5e-3}, {DType::bf16, 1.5e-2}}) {
    SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)));
    AttentionCase c = rpb_case({9, 11}, neighborhood_mask({5, 3}, {1, 3}), dtype);
    c.strided = true;
    expect_matches_reference(c, tolerance);
    c.rpb = dtype;  // a bias in q's dtype
    expect_matches_reference(c, tolerance);
  }
}

TEST(CpuAttentionRpb, BiasGradientMatchesFiniteDifferencesOfTheForward) {
  AttentionCase c = rpb_case({6, 7}, neighborhood_mask({3, 5}, {2, 1}));
  c.batch = 1;
  AttentionTensors t(c);
  t.run_forward(1);
  t.run_backward(1);
  auto loss = [&] {
    t.run_forward(1);
    const std::vector<double> out = to_doubles(t.out.view);
    const std::vector<double> weight = to_doubles(t.grad_out.view);
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * weight[i];
    return sum;
  };
  std::vector<double> numeric;
  for_each_offset(t.rpb.view, [&](int64_t offset) {
    constexpr double kStep = 1e-5;
    double* x = static_cast<double*>(t.rpb.view.data) + offset;
    const double saved = *x;
    *x = saved + kStep;
    const double above = loss();
    *x = saved - kStep;
    const double below = loss();
    *x = saved;
    numeric.push_back((above - below) / (2 * kStep));
  });
  EXPECT_LE(relative_l2_values(to_doubles(t.grad_rpb.view), numeric), 1e-5);
}

TEST(CpuAttentionRpb, BiasGradientIsBitwiseTheSameForAnyThreadCount) {
  AttentionCase c = rpb_case({12, 13}, neighborhood_mask({5, 5}), DType::f32);
  c.batch = 3;
  AttentionTensors t(c);
  t.run_forward();
  t.run_backward(1);
  const std::vector<double> one_thread = to_doubles(t.grad_rpb.view);
  for (const int32_t threads : {2, 3, 8}) {
    t.run_backward(threads);
    EXPECT_EQ(to_doubles(t.grad_rpb.view), one_thread) << threads << " threads";
  }
}

TEST(CpuAttentionRpb, WithoutGradRpbTheOtherGradientsAreUnchanged) {
  AttentionTensors t(rpb_case({9, 11}, neighborhood_mask({5, 3})));
  t.run_forward();
  t.run_backward();
  const std::vector<double> with = to_doubles(t.grad_q.view);
  AttentionBackward p = t.backward_problem();
  p.grad_rpb = TensorView{};
  RunOptions options;
  options.backend = Backend::cpu;
  attention_backward(p, options);
  EXPECT_EQ(to_doubles(t.grad_q.view), with);
}

// --- validation ---------------------------------------------------------------------------------

AttentionForward grid_with_rpb(AttentionMask mask, std::initializer_list<int64_t> rpb_shape,
                               DType rpb_dtype = DType::f32) {
  AttentionForward p = valid_attention_forward();  // q [2, 6, 5, 4, 8] float32
  p.mask = mask;
  p.mask.rpb = view_of(rpb_dtype, rpb_shape);
  return p;
}

std::string forward_error(const AttentionForward& p) {
  return error_message([&] { detail::validate_attention_forward(p, {}); });
}

TEST(ValidateAttentionRpb, AValidBiasPasses) {
  EXPECT_NO_THROW(detail::validate_attention_forward(grid_with_rpb(neighborhood_mask({3, 5}, {2, 1}), {4, 5, 9}), {}));
}

TEST(ValidateAttentionRpb, TheShapeFollowsHeadsAndKernelSizes) {
  EXPECT_THAT(forward_error(grid_with_rpb(neighborhood_mask({3, 5}), {4, 5, 5})),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("[4, 5, 9]"), HasSubstr("2*K_1-1")));
  EXPECT_THAT(forward_error(grid_with_rpb(neighborhood_mask({3, 5}), {4, 5})),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("rank")));
}

TEST(ValidateAttentionRpb, TheDtypeIsFloat32OrQs) {
  EXPECT_THAT(forward_error(grid_with_rpb(neighborhood_mask({3, 5}), {4, 5, 9}, DType::f16)),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("float32 or q's dtype")));
}

TEST(ValidateAttentionRpb, OnlyNeighborhoodsWithStrideOneAndNoCausalDimension) {
  EXPECT_THAT(forward_error(grid_with_rpb(neighborhood_mask({3, 5}, {}, {1, 2}), {4, 5, 9})),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("stride"), HasSubstr("stride 1 and no causal")));
  EXPECT_THAT(forward_error(grid_with_rpb(neighborhood_mask({3, 5}, {}, {}, {true, false}), {4, 5, 9})),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("causal")));
  EXPECT_THAT(forward_error(grid_with_rpb(causal_mask(), {4, 5, 9})),
              AllOf(HasSubstr("mask.rpb"), HasSubstr("only with neighborhood masks")));
}

TEST(ValidateAttentionRpb, GradRpbNeedsRpbAndItsShapeAndDtype) {
  AttentionBackward p = valid_attention_backward();
  p.mask = neighborhood_mask({3, 5});
  p.grad_rpb = view_of(DType::f32, {4, 5, 9});
  EXPECT_THAT(error_message([&] { detail::validate_attention_backward(p, {}); }),
              AllOf(HasSubstr("grad_rpb"), HasSubstr("without mask.rpb")));
  p.mask.rpb = view_of(DType::f32, {4, 5, 9});
  EXPECT_NO_THROW(detail::validate_attention_backward(p, {}));
  p.grad_rpb = view_of(DType::f64, {4, 5, 9});
  EXPECT_THAT(error_message([&] { detail::validate_attention_backward(p, {}); }), HasSubstr("grad_rpb"));
  p.grad_rpb = view_of(DType::f32, {4, 5, 8});
  EXPECT_THAT(error_message([&] { detail::validate_attention_backward(p, {}); }),
              AllOf(HasSubstr("grad_rpb"), HasSubstr("mask.rpb's shape")));
}

}  // namespace
}  // namespace attnkit::test
