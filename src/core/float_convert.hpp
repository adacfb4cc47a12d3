// fp16 / bf16 <-> fp32 conversion on the host, bit-exact with IEEE round-to-nearest-even, so the CPU
// backend reads and writes the same values a GPU would.
#pragma once
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"

namespace attnkit::detail {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal: value = mantissa * 2^-24.
    float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -value : value;
  }
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (abs_bits < 0x38800000u) {                        // below the smallest normal 2^-14
    if (abs_bits < 0x33000000u) return sign;           // below half the smallest subnormal
    // Subnormal: shift the full mantissa into place with round-to-nearest-even.
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent - 150) and the subnormal unit is 2^-24, so the half's
    // mantissa is mantissa >> (126 - exponent), rounded to nearest even.
    const uint32_t shift = 126 - exponent;
    const uint32_t q = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t rounded = q + ((remainder > halfway || (remainder == halfway && (q & 1u))) ? 1u : 0u);
    return sign | static_cast<uint16_t>(rounded);
  }
  // Normal: rebias exponent 127 -> 15 and round the 13 dropped bits to nearest even.
  uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

// Reads element i of a buffer of the given dtype as a double (used by oracles and tests).
inline double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::boolean: return static_cast<const bool*>(base)[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

inline void store_from_double(void* base, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(value); break;
    case DType::f64: static_cast<double*>(base)[i] = value; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_half(static_cast<float>(value)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(value)); break;
    case DType::boolean: static_cast<bool*>(base)[i] = value != 0.0; break;
  }
}

}  // namespace attnkit::detail
