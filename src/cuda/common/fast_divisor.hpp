// Division of unsigned 32-bit numerators by a divisor known only at run time, in a multiply-high, an add
// and a shift, for loops that divide by the same number every iteration. Shared by kernels and their CPU
// unit tests.
//
// Round-up method (Granlund-Montgomery): with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1,
// n / d = (umulhi(n, m) + n) >> l for every n < 2^32, the sum taken in 64 bits. The constructor pays one
// 64-bit division, once.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"

namespace attnkit::cuda {

class FastDivisor {
 public:
  // `divisor` must be at least 1.
  ATTNKIT_HOST_DEVICE explicit FastDivisor(uint32_t divisor) : divisor_(divisor) {
    uint32_t shift = 0;
    while ((uint64_t{1} << shift) < divisor) ++shift;
    shift_ = shift;
    multiplier_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }

  ATTNKIT_HOST_DEVICE uint32_t divisor() const { return divisor_; }

  ATTNKIT_HOST_DEVICE uint32_t quotient(uint32_t numerator) const {
    return static_cast<uint32_t>((uint64_t{multiply_high(numerator, multiplier_)} + numerator) >> shift_);
  }

  ATTNKIT_HOST_DEVICE uint32_t remainder(uint32_t numerator) const {
    return numerator - quotient(numerator) * divisor_;
  }

 private:
  ATTNKIT_HOST_DEVICE static uint32_t multiply_high(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((uint64_t{a} * b) >> 32);
#endif
  }

  uint32_t divisor_;
  uint32_t multiplier_;
  uint32_t shift_;
};

}  // namespace attnkit::cuda
