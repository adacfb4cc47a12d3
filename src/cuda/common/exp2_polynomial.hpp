// 2^x on the FMA and integer pipes instead of the MUFU unit, for kernels whose exponentials outrun the
// MUFU's 16 results per SM and cycle (the Hopper forward's softmax computes part of its exponentials here).
//
// Method: x = n + f with n = floor(x) and f in [0, 1). n comes from one round-down add of 1.5 * 2^23, which
// leaves n in the low mantissa bits of the sum (the sum's spacing there is 1); subtracting the constant back
// gives n as a float, so f = x - n. 2^f is a cubic 1 + f (c1 + f (c2 + f c3)) fitted for least maximum
// relative error on [0, 1) with its value at 0 exactly 1; 2^n is put in by adding n to the exponent field
// (the sum's bits shifted left by 23 are n * 2^23 modulo 2^32). Instructions: a max, three adds, three FMAs
// and one integer shift-add.
//
// Accuracy (tests/cpp/test_exp2_polynomial.cpp sweeps the inputs): relative error at most 8.6e-5 for x in
// [-126, 0] (the cubic's own error; bf16 and fp16 round P to 2^-9 and 2^-12 relative). x = 0 gives exactly 1,
// every integer -126 <= n <= 0 exactly 2^n. Inputs at or below -127, -inf and NaN give exactly 0 (the max
// with -127 makes n = -127 and f = 0, whose sum of bits is 0); inputs in (-127, -126) give a subnormal below
// 2^-126, where ex2.approx.ftz gives 0. Valid for x < 127.
#pragma once
#include <cstdint>
#include <cstring>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "core/host_device.hpp"

namespace attnkit::cuda {

// The cubic's coefficients (2^f = 1 + f (c1 + f (c2 + f c3)), relative minimax on [0, 1) with p(0) = 1).
inline constexpr float kExp2C1 = 0.695116788f;
inline constexpr float kExp2C2 = 0.227644985f;
inline constexpr float kExp2C3 = 0.0770670459f;

ATTNKIT_HOST_DEVICE float exp2_polynomial(float x) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23
  x = fmaxf(x, -127.f);                 // also maps -inf and NaN to -127
#if defined(__CUDA_ARCH__)
  const float shifted = __fadd_rd(x, kShift);  // kShift + floor(x), exactly
  const float f = x - (shifted - kShift);
  const float p = fmaf(fmaf(fmaf(kExp2C3, f, kExp2C2), f, kExp2C1), f, 1.f);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(shifted) << 23));
#else
  const float shifted = std::floor(x) + kShift;  // the same value as the device's round-down add
  const float f = x - (shifted - kShift);
  const float p = std::fmaf(std::fmaf(std::fmaf(kExp2C3, f, kExp2C2), f, kExp2C1), f, 1.f);
  uint32_t p_bits, shifted_bits;
  std::memcpy(&p_bits, &p, 4);
  std::memcpy(&shifted_bits, &shifted, 4);
  const uint32_t bits = p_bits + (shifted_bits << 23);
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
#endif
}

}  // namespace attnkit::cuda
