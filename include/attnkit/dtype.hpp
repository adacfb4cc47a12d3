// Element types attnkit reads and writes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "attnkit/export.hpp"

namespace attnkit {

// Values match the C ABI's attnkit_dtype.
enum class DType : int32_t { f32 = 0, f16 = 1, bf16 = 2, f64 = 3, boolean = 4 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

}  // namespace attnkit
