// FastDivisor (src/cuda/common/fast_divisor.hpp): quotient and remainder against the / and % operators for
// every divisor up to 4096 over the numerators that stress rounding (multiples, their neighbours, the top of
// the range), and for random divisors and numerators of the whole 32-bit range.
#include "cuda/common/fast_divisor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using attnkit::cuda::FastDivisor;

void expect_divides(uint32_t divisor, uint32_t numerator) {
  const FastDivisor fast(divisor);
  ASSERT_EQ(fast.quotient(numerator), numerator / divisor) << numerator << " / " << divisor;
  ASSERT_EQ(fast.remainder(numerator), numerator % divisor) << numerator << " % " << divisor;
}

TEST(FastDivisor, MatchesIntegerDivisionNearMultiplesOfSmallDivisors) {
  constexpr uint32_t kTop = std::numeric_limits<uint32_t>::max();
  for (uint32_t divisor = 1; divisor <= 4096; ++divisor) {
    const FastDivisor fast(divisor);
    EXPECT_EQ(fast.divisor(), divisor);
    std::vector<uint32_t> numerators = {0, 1, divisor - 1, divisor, divisor + 1, kTop, kTop - 1, kTop - divisor};
    for (const uint32_t multiple : {uint32_t{7}, uint32_t{1000}, kTop / divisor}) {
      const uint64_t n = uint64_t{multiple} * divisor;
      for (const int64_t delta : {-1, 0, 1}) {
        const int64_t value = static_cast<int64_t>(n) + delta;
        if (value >= 0 && value <= kTop) numerators.push_back(static_cast<uint32_t>(value));
      }
    }
    for (const uint32_t numerator : numerators) {
      ASSERT_EQ(fast.quotient(numerator), numerator / divisor) << numerator << " / " << divisor;
      ASSERT_EQ(fast.remainder(numerator), numerator % divisor) << numerator << " % " << divisor;
    }
  }
}

TEST(FastDivisor, MatchesIntegerDivisionOnRandomOperands) {
  std::mt19937 random(2026);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<int> bits(0, 31);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t divisor = std::max<uint32_t>(1, any(random) >> bits(random));
    expect_divides(divisor, any(random));
    expect_divides(divisor, any(random) >> bits(random));
  }
  for (const uint32_t divisor : {uint32_t{1} << 31, (uint32_t{1} << 31) + 1, std::numeric_limits<uint32_t>::max()}) {
    for (int i = 0; i < 1000; ++i) expect_divides(divisor, any(random));
  }
}

}  // namespace
