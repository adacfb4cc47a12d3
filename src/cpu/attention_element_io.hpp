// Element types the CPU attention kernels read and write, and the accumulator type each one uses
// (float for fp32/fp16/bf16, double for fp64). Rows are converted once into padded accumulator
// buffers so that the inner loops are unit-stride and of a fixed vector width.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "core/float_convert.hpp"

namespace attnkit::cpu {

// Distinct storage types for the two 16-bit formats.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline float load_element(const float* p) { return *p; }
inline double load_element(const double* p) { return *p; }
inline float load_element(const Half* p) { return detail::half_to_float(p->bits); }
inline float load_element(const BFloat16* p) { return detail::bf16_to_float(p->bits); }

inline void store_element(float* p, float v) { *p = v; }
inline void store_element(double* p, double v) { *p = v; }
inline void store_element(Half* p, float v) { p->bits = detail::float_to_half(v); }
inline void store_element(BFloat16* p, float v) { p->bits = detail::float_to_bf16(v); }

template <class Storage>
struct AccumulatorOf {
  using type = float;
};
template <>
struct AccumulatorOf<double> {
  using type = double;
};

// Accumulator buffers hold rows padded with zeros to a multiple of kLanes (one 64-byte line), the
// width the row loops are written for. Hidden: GCC exports instances of inline variable templates
// even under -fvisibility=hidden.
template <class Acc>
__attribute__((visibility("hidden"))) inline constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(Acc));

template <class Acc>
constexpr int64_t padded_width(int64_t n) {
  return (n + kLanes<Acc> - 1) / kLanes<Acc> * kLanes<Acc>;
}

// dst[0, padded) = factor * src[0, n), then zeros.
template <class Storage, class Acc>
void load_row(const Storage* src, int64_t n, int64_t padded, Acc factor, Acc* dst) {
  int64_t t = 0;
  for (; t < n; ++t) dst[t] = static_cast<Acc>(load_element(src + t)) * factor;
  for (; t < padded; ++t) dst[t] = Acc(0);
}

template <class Storage, class Acc>
void store_row(const Acc* src, int64_t n, Acc factor, Storage* dst) {
  for (int64_t t = 0; t < n; ++t) store_element(dst + t, src[t] * factor);
}

// Calls f(Storage{}) with the storage type of dtype.
template <class F>
decltype(auto) dispatch_storage(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::boolean: break;
  }
  throw Error(Status::unsupported, std::string(what) + ": dtype " + std::string(dtype_name(dtype)) +
                                       " is not supported by the CPU backend; allowed: float32, float16, "
                                       "bfloat16, float64");
}

}  // namespace attnkit::cpu
