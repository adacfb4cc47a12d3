#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/float_convert.hpp"

namespace attnkit::detail {
namespace {

TEST(FloatConvert, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00u) == 0x7c00u) continue;  // inf and NaN
    EXPECT_EQ(float_to_half(half_to_float(h)), h) << "bits " << bits;
  }
}

TEST(FloatConvert, HalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048.0f), 0x3c00u);  // tie -> even (down)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048.0f), 0x3c02u);  // tie -> even (up)
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);               // overflows to inf
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);               // largest finite
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000u);  // tie -> even (zero)
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002u);  // tie -> even (two)
}

TEST(FloatConvert, Bf16RoundTripsAndRoundsToNearestEven) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if ((h & 0x7f80u) == 0x7f80u) continue;
    EXPECT_EQ(float_to_bf16(bf16_to_float(h)), h);
  }
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80u);
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256.0f), 0x3f82u);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

}  // namespace
}  // namespace attnkit::detail
