// Packing for the CPU GEMM: copies a block of op(A) or op(B), in any dtype and with any strides,
// into contiguous panels of the accumulation type in exactly the order the micro-kernel reads them.
//   A block (mc x kc at row i0, depth p0) -> slivers of MR rows: dst[(s * kc + p) * MR + r]
//   B panel (kc x nc at depth p0, col j0) -> slivers of NR cols: dst[(s * kc + p) * NR + c]
// Rows or columns past the matrix edge are zero, so edge tiles run the full kernel harmlessly.
// The loop nest walks the source along its unit-stride dimension when it has one.
#pragma once
#include <cstdint>
#include <cstdlib>

#include "core/float_convert.hpp"
#include "cpu/gemm_operand.hpp"

namespace attnkit::cpu::gemm_detail {

// Calls f(typed pointer, widen) for the operand's dtype.
template <typename F>
void with_element_type(DType dtype, const void* data, F&& f) {
  switch (dtype) {
    case DType::f32: f(static_cast<const float*>(data), [](float x) { return x; }); break;
    case DType::f64: f(static_cast<const double*>(data), [](double x) { return x; }); break;
    case DType::f16: f(static_cast<const uint16_t*>(data), [](uint16_t x) { return detail::half_to_float(x); }); break;
    case DType::bf16: f(static_cast<const uint16_t*>(data), [](uint16_t x) { return detail::bf16_to_float(x); }); break;
    case DType::boolean: f(static_cast<const bool*>(data), [](bool x) { return x ? 1.0f : 0.0f; }); break;
  }
}

// Packs the (extent_major x depth) block starting at element offset `base`, where the sliver
// dimension (rows of A, columns of B) has stride major_stride and the depth has stride depth_stride,
// into slivers of `width`: dst[(s * depth + p) * width + r].
template <typename Acc>
void pack_slivers(const GemmOperand& op, int64_t base, int64_t extent_major, int64_t major_stride, int64_t depth,
                  int64_t depth_stride, int64_t width, Acc* dst) {
  with_element_type(op.dtype, op.data, [&](const auto* src, auto widen) {
    const int64_t slivers = (extent_major + width - 1) / width;
    const bool depth_contiguous = std::llabs(depth_stride) <= std::llabs(major_stride);
    for (int64_t s = 0; s < slivers; ++s) {
      Acc* out = dst + s * depth * width;
      const int64_t filled = extent_major - s * width < width ? extent_major - s * width : width;
      if (depth_contiguous) {
        for (int64_t r = 0; r < filled; ++r) {
          const auto* in = src + base + (s * width + r) * major_stride;
          for (int64_t p = 0; p < depth; ++p) out[p * width + r] = static_cast<Acc>(widen(in[p * depth_stride]));
        }
      } else {
        for (int64_t p = 0; p < depth; ++p) {
          const auto* in = src + base + s * width * major_stride + p * depth_stride;
          for (int64_t r = 0; r < filled; ++r) out[p * width + r] = static_cast<Acc>(widen(in[r * major_stride]));
        }
      }
      for (int64_t p = 0; p < depth; ++p) {
        for (int64_t r = filled; r < width; ++r) out[p * width + r] = Acc(0);
      }
    }
  });
}

// op(A)[i0 : i0+mc, p0 : p0+kc] of batch b, MR-row slivers.
template <typename Acc>
void pack_a(const GemmOperand& a, int64_t b, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t mr, Acc* dst) {
  pack_slivers(a, a.offset(b, i0, p0), mc, a.row_stride, kc, a.col_stride, mr, dst);
}

// op(B)[p0 : p0+kc, j0 : j0+nc] of batch b, NR-column slivers.
template <typename Acc>
void pack_b(const GemmOperand& bop, int64_t b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, Acc* dst) {
  pack_slivers(bop, bop.offset(b, p0, j0), nc, bop.col_stride, kc, bop.row_stride, nr, dst);
}

}  // namespace attnkit::cpu::gemm_detail
