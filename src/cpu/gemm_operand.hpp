// How the GEMM driver addresses its operands: op(X) as a logical [rows, cols] matrix per batch with
// arbitrary element strides, whatever the view's layout (row-major, column-major, transposed).
// A transposed operand is the same memory with its row and column strides swapped, and a batch
// extent of 1 broadcasts through a batch stride of 0.
#pragma once
#include <cstdint>

#include "attnkit/tensor.hpp"

namespace attnkit::cpu::gemm_detail {

struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t batch = 1;
  int64_t rows = 0, cols = 0;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0;

  int64_t offset(int64_t b, int64_t r, int64_t c) const { return b * batch_stride + r * row_stride + c * col_stride; }
};

// op(view) for a rank-2 [rows, cols] or rank-3 [batch, rows, cols] view.
inline GemmOperand operand_of(const TensorView& view, bool transpose) {
  GemmOperand op;
  op.data = view.data;
  op.dtype = view.dtype;
  const int first = view.rank == 3 ? 1 : 0;
  if (view.rank == 3) {
    op.batch = view.extents[0];
    op.batch_stride = view.extents[0] == 1 ? 0 : view.strides[0];
  }
  op.rows = view.extents[first];
  op.cols = view.extents[first + 1];
  op.row_stride = view.strides[first];
  op.col_stride = view.strides[first + 1];
  if (transpose) {
    std::swap(op.rows, op.cols);
    std::swap(op.row_stride, op.col_stride);
  }
  return op;
}

}  // namespace attnkit::cpu::gemm_detail
