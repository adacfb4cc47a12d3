// Moves 2-D strided blocks of any attnkit dtype into dense row-major buffers of the accumulation
// type and back. Retention uses it for the [T, X] slice of a [B, T, H, X] view at (b, h) and for the
// [Dk, Dv] slice of a [B, H, Dk, Dv] state at (b, h). Reads widen exactly; writes round to nearest
// even (float_convert.hpp), the way a GPU stores.
#pragma once
#include <cstdint>

#include "attnkit/tensor.hpp"
#include "core/float_convert.hpp"

namespace attnkit::cpu::retention {

// A rows x cols block of a view: element (r, c) lives at offset + r*row_stride + c*col_stride.
struct StridedBlock {
  int64_t offset = 0;
  int64_t rows = 0, row_stride = 0;
  int64_t cols = 0, col_stride = 1;
};

// The [T, X] block of a [B, T, H, X] view at batch b, head h.
inline StridedBlock token_block(const TensorView& view, int64_t b, int64_t h) {
  return {b * view.strides[0] + h * view.strides[2], view.extents[1], view.strides[1], view.extents[3],
          view.strides[3]};
}

// The [Dk, Dv] block of a [B, H, Dk, Dv] state view at batch b, head h.
inline StridedBlock state_block(const TensorView& view, int64_t b, int64_t h) {
  return {b * view.strides[0] + h * view.strides[1], view.extents[2], view.strides[2], view.extents[3],
          view.strides[3]};
}

namespace io_detail {

template <typename Element, typename Acc, typename Widen>
void gather(const Element* base, const StridedBlock& block, Acc* dst, Widen widen) {
  for (int64_t r = 0; r < block.rows; ++r) {
    const Element* row = base + block.offset + r * block.row_stride;
    for (int64_t c = 0; c < block.cols; ++c)
      dst[r * block.cols + c] = static_cast<Acc>(widen(row[c * block.col_stride]));
  }
}

template <typename Element, typename Acc, typename Narrow>
void scatter(const Acc* src, const StridedBlock& block, Element* base, Narrow narrow) {
  for (int64_t r = 0; r < block.rows; ++r) {
    Element* row = base + block.offset + r * block.row_stride;
    for (int64_t c = 0; c < block.cols; ++c) row[c * block.col_stride] = narrow(src[r * block.cols + c]);
  }
}

}  // namespace io_detail

template <typename Acc>
void gather_block(const TensorView& view, const StridedBlock& block, Acc* dst) {
  using namespace io_detail;
  switch (view.dtype) {
    case DType::f32: gather(static_cast<const float*>(view.data), block, dst, [](float x) { return x; }); break;
    case DType::f64: gather(static_cast<const double*>(view.data), block, dst, [](double x) { return x; }); break;
    case DType::f16: gather(static_cast<const uint16_t*>(view.data), block, dst, detail::half_to_float); break;
    case DType::bf16: gather(static_cast<const uint16_t*>(view.data), block, dst, detail::bf16_to_float); break;
    case DType::boolean:
      gather(static_cast<const bool*>(view.data), block, dst, [](bool x) { return x ? 1.0f : 0.0f; });
      break;
  }
}

template <typename Acc>
void scatter_block(const Acc* src, const TensorView& view, const StridedBlock& block) {
  using namespace io_detail;
  switch (view.dtype) {
    case DType::f32:
      scatter(src, block, static_cast<float*>(view.data), [](Acc x) { return static_cast<float>(x); });
      break;
    case DType::f64:
      scatter(src, block, static_cast<double*>(view.data), [](Acc x) { return static_cast<double>(x); });
      break;
    case DType::f16:
      scatter(src, block, static_cast<uint16_t*>(view.data),
              [](Acc x) { return detail::float_to_half(static_cast<float>(x)); });
      break;
    case DType::bf16:
      scatter(src, block, static_cast<uint16_t*>(view.data),
              [](Acc x) { return detail::float_to_bf16(static_cast<float>(x)); });
      break;
    case DType::boolean: scatter(src, block, static_cast<bool*>(view.data), [](Acc x) { return x != Acc(0); }); break;
  }
}

}  // namespace attnkit::cpu::retention
