#include "tune/extent_bucket.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace attnkit::tune {

int64_t bucket_extent(int64_t extent) {
  if (extent <= 8) return extent;
  // Choose the exponent e so that extent / 2^e lies in (4, 8]; then round the mantissa up.
  const int top_bit = 63 - std::countl_zero(static_cast<uint64_t>(extent - 1));  // floor(log2(extent - 1))
  const int shift = top_bit - 2;
  const int64_t unit = int64_t{1} << shift;
  const int64_t mantissa = (extent + unit - 1) >> shift;  // in 5..8
  return mantissa << shift;
}

int32_t density_bucket(double density) {
  if (!(density > 0.0)) return 10;
  if (density >= 1.0) return 0;
  const double level = std::floor(-std::log2(density));
  // floor(-log2 d) gives 2^-b >= d; an exact power of two belongs to its own bucket.
  return static_cast<int32_t>(std::clamp(level, 0.0, 10.0));
}

double density_of_bucket(int32_t bucket) { return std::ldexp(1.0, -bucket); }

}  // namespace attnkit::tune
