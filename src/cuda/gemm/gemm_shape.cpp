#include "cuda/gemm/gemm_shape.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

namespace attnkit::cuda::gemm {
namespace {

struct Operand {
  int64_t rows = 0, cols = 0;  // of op(X)
  int64_t row = 0, col = 0;    // strides of op(X)
  int64_t batch = 0;           // batch stride, 0 when the batch extent is 1
};

Operand operand_of(const TensorView& view, bool transpose) {
  const int r = view.rank;
  Operand o{view.extents[r - 2], view.extents[r - 1], view.strides[r - 2], view.strides[r - 1], 0};
  if (r == 3 && view.extents[0] > 1) o.batch = view.strides[0];
  if (transpose) {
    std::swap(o.rows, o.cols);
    std::swap(o.row, o.col);
  }
  return o;
}

Operand transposed(Operand o) {
  std::swap(o.rows, o.cols);
  std::swap(o.row, o.col);
  return o;
}

int64_t packed(int64_t extent) { return (std::max<int64_t>(extent, 1) + 7) / 8 * 8; }

// Chooses the contiguous dimension: the one of extent > 1 with stride 1 (columns when both qualify or
// neither has an extent > 1), and gives a dimension of extent 1 a packed stride.
void normalise(Operand& o) {
  bool columns_contiguous = o.col == 1;
  if (o.cols > 1 && o.col == 1) {
    columns_contiguous = true;
  } else if (o.rows > 1 && o.row == 1) {
    columns_contiguous = false;
  }
  if (columns_contiguous) {
    o.col = 1;
    if (o.rows == 1) o.row = packed(o.cols);
  } else {
    o.row = 1;
    if (o.cols == 1) o.col = packed(o.rows);
  }
}

}  // namespace

GemmShape describe_gemm(const GemmProblem& p) {
  Operand a = operand_of(p.a, p.transpose_a);
  Operand b = operand_of(p.b, p.transpose_b);
  Operand c = operand_of(p.c, false);
  GemmShape s;
  s.dtype = p.a.dtype;
  s.batch = p.c.rank == 3 ? p.c.extents[0] : 1;
  // C row-major unless its columns are strided (then its rows have stride 1): compute C^T.
  s.swapped = c.col != 1 && c.cols > 1;
  if (s.swapped) {
    const Operand a_new = transposed(b), b_new = transposed(a);
    a = a_new;
    b = b_new;
    c = transposed(c);
  }
  if (c.rows == 1) c.row = packed(c.cols);
  c.col = 1;
  s.m = c.rows;
  s.n = c.cols;
  s.k = a.cols;
  s.product_zero = s.k == 0 || p.alpha == 0.0;
  if (!s.product_zero) {
    normalise(a);
    normalise(b);
  }
  s.a_row = a.row, s.a_col = a.col, s.a_batch = a.batch;
  s.b_row = b.row, s.b_col = b.col, s.b_batch = b.batch;
  s.c_row = c.row, s.c_batch = c.batch;
  fold_broadcast_batch(s);
  return bind_gemm(s, p);
}

void fold_broadcast_batch(GemmShape& s) {
  if (s.batch <= 1 || s.b_batch != 0 || s.product_zero || !s.a_k_major()) return;
  if (s.a_batch != s.m * s.a_row || s.c_batch != s.m * s.c_row) return;
  if (s.batch * s.m > int64_t{std::numeric_limits<int32_t>::max()}) return;  // the kernels' 32-bit problem shape
  s.m *= s.batch;
  s.batch = 1;
  s.a_batch = 0;
  s.c_batch = 0;
}

GemmShape bind_gemm(GemmShape shape, const GemmProblem& p) {
  shape.a = shape.swapped ? p.b.data : p.a.data;
  shape.b = shape.swapped ? p.a.data : p.b.data;
  shape.c = p.c.data;
  return shape;
}

bool gemm_aligned(const GemmShape& s, int bytes) {
  const int64_t size = static_cast<int64_t>(dtype_size(s.dtype));
  auto fits = [&](int64_t elements) { return elements * size % bytes == 0; };
  auto address_fits = [&](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % static_cast<unsigned>(bytes) == 0;
  };
  if (!address_fits(s.a) || !address_fits(s.b) || !address_fits(s.c)) return false;
  if (!fits(s.a_batch) || !fits(s.b_batch) || !fits(s.c_batch) || !fits(s.c_row) || !fits(s.n)) return false;
  const bool a_ok = s.a_k_major() ? fits(s.a_row) && fits(s.k) : fits(s.a_col) && fits(s.m);
  const bool b_ok = s.b_k_major() ? fits(s.b_col) && fits(s.k) : fits(s.b_row) && fits(s.n);
  return a_ok && b_ok;
}

}  // namespace attnkit::cuda::gemm
