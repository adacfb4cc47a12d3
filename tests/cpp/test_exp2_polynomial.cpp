// exp2_polynomial (src/cuda/common/exp2_polynomial.hpp), the Hopper forward's FMA-pipe exponential: relative
// error against double-precision exp2 over the softmax's input range, and its exact values (0 -> 1, integers,
// -inf, NaN and large negative inputs -> 0). The host build runs the same float operations as the device's
// (the round-down add of the device is the exact floor plus the shift constant here).
#include "cuda/common/exp2_polynomial.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

namespace {

using attnkit::cuda::exp2_polynomial;

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

uint32_t to_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}

double relative_error(float x) {
  const double exact = std::exp2(static_cast<double>(x));
  return std::fabs(static_cast<double>(exp2_polynomial(x)) - exact) / exact;
}

// Largest relative error over the floats between `from` and `to` (same sign), every `step`-th bit pattern.
double worst_relative_error(float from, float to, uint32_t step, float* worst_at) {
  uint32_t a = to_bits(from), b = to_bits(to);
  if (a > b) std::swap(a, b);
  double worst = 0.0;
  for (uint64_t bits = a; bits <= b; bits += step) {
    const float x = from_bits(static_cast<uint32_t>(bits));
    const double error = relative_error(x);
    if (error > worst) {
      worst = error;
      *worst_at = x;
    }
  }
  return worst;
}

// The fit's bound over [0, 1) is 8.56e-5; float rounding of the evaluation adds a few ulps.
constexpr double kBound = 8.7e-5;

TEST(Exp2Polynomial, RelativeErrorOverTheSoftmaxRange) {
  float at = 0.f;
  // Every 61st float of [-126, 0] (scores minus their row maximum), and every float of [-1, -0.5), where the
  // cubic's error peaks.
  const double sweep = worst_relative_error(-126.f, -0.f, 61, &at);
  std::printf("    max relative error over [-126, 0] (every 61st float): %.3e at %.8g\n", sweep, at);
  EXPECT_LE(sweep, kBound) << "at x = " << at;
  const double dense = worst_relative_error(-1.f, std::nextafter(-0.5f, 0.f), 1, &at);
  std::printf("    max relative error over [-1, -0.5) (every float): %.3e at %.8g\n", dense, at);
  EXPECT_LE(dense, kBound) << "at x = " << at;
  EXPECT_GT(dense, 1e-5) << "the sweep should see the cubic's error, not a perfect exp2";
  // Slightly positive inputs (a score rounded above its row's reference) and the rest of the valid range.
  const double positive = worst_relative_error(0.f, 126.f, 61, &at);
  EXPECT_LE(positive, kBound) << "at x = " << at;
}

TEST(Exp2Polynomial, ExactValues) {
  EXPECT_EQ(exp2_polynomial(0.f), 1.f);
  EXPECT_EQ(exp2_polynomial(-0.f), 1.f);
  for (int n = -126; n <= 126; ++n)
    EXPECT_EQ(exp2_polynomial(static_cast<float>(n)), std::ldexp(1.f, n)) << "n = " << n;
}

TEST(Exp2Polynomial, LargeNegativeInfinityAndNaNGiveZero) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -1e4f, -200.f, -128.f, -127.5f, -127.f, std::nextafter(-127.f, -inf)}) {
    EXPECT_EQ(to_bits(exp2_polynomial(x)), 0u) << "x = " << x;
  }
  EXPECT_EQ(to_bits(exp2_polynomial(std::numeric_limits<float>::quiet_NaN())), 0u);
  // (-127, -126): a non-negative value below 2^-126 (subnormal), where the MUFU's ex2.approx.ftz gives 0.
  for (float x = -126.9f; x < -126.f; x += 0.1f) {
    const float y = exp2_polynomial(x);
    EXPECT_GE(y, 0.f) << "x = " << x;
    EXPECT_LT(y, std::ldexp(1.f, -126)) << "x = " << x;
  }
}

TEST(Exp2Polynomial, MonotoneAcrossIntegerBoundaries) {
  // Softmax weights of nearly equal scores keep their order: no step down where n changes.
  for (int n = -125; n <= 0; ++n) {
    const float below = std::nextafter(static_cast<float>(n), -1e9f);
    EXPECT_LE(exp2_polynomial(below), exp2_polynomial(static_cast<float>(n))) << "n = " << n;
  }
}

}  // namespace
