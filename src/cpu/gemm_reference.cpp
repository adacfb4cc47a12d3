// Double GEMM by definition (see gemm_reference.hpp). Deliberately shares no indexing code with the fast path:
// op(X)[b, r, c] is read as X[b, r, c] or X[b, c, r] straight from the view. Each output is the same ascending sum over
// p of double products as a triple loop over the views would give (bit-identical), but the operands are first widened
// into blocks of kBlock rows of op(A) and kBlock columns of op(B), each a contiguous run of K doubles, so that the
// inner loop reads memory in order instead of converting two strided elements per product: checking a large problem
// (the CUDA tests' decode shapes: 64 x 4160 x 4096) stays bearable. Blocks and rows of C are spread over OpenMP
// threads.
#include "cpu/gemm_reference.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/float_convert.hpp"
#include "core/zero_size.hpp"

namespace attnkit::cpu::reference {
namespace {

constexpr int64_t kBlock = 128;  // rows of op(A) and columns of op(B) widened at a time

int64_t batch_extent(const TensorView& x) { return x.rank == 3 ? x.extents[0] : 1; }

// Element [row, col] of matrix `batch` of a rank-2 or rank-3 view (batch extent 1 broadcasts).
int64_t offset(const TensorView& x, int64_t batch, int64_t row, int64_t col) {
  if (x.rank == 2) return row * x.strides[0] + col * x.strides[1];
  return (x.extents[0] == 1 ? 0 : batch) * x.strides[0] + row * x.strides[1] + col * x.strides[2];
}

double op_element(const TensorView& x, bool transpose, int64_t batch, int64_t row, int64_t col) {
  return detail::load_as_double(x.data, x.dtype, transpose ? offset(x, batch, col, row) : offset(x, batch, row, col));
}

// Element offset of op(X)[batch, row, col].
int64_t op_offset(const TensorView& x, bool transpose, int64_t batch, int64_t row, int64_t col) {
  return transpose ? offset(x, batch, col, row) : offset(x, batch, row, col);
}

// out[r * cols + col] = op(X)[batch, row0 + r, col] as double for r < rows, walking the view along its shorter stride.
void widen(const TensorView& x, bool transpose, int64_t batch, int64_t row0, int64_t rows, int64_t cols, double* out,
           int threads) {
  const int64_t base = op_offset(x, transpose, batch, 0, 0);
  const bool rows_inner =
      std::abs(op_offset(x, transpose, batch, 1, 0) - base) < std::abs(op_offset(x, transpose, batch, 0, 1) - base);
  if (rows_inner) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t col = 0; col < cols; ++col) {
      for (int64_t r = 0; r < rows; ++r) out[r * cols + col] = op_element(x, transpose, batch, row0 + r, col);
    }
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) out[r * cols + col] = op_element(x, transpose, batch, row0 + r, col);
    }
  }
}

}  // namespace

void gemm(const GemmProblem& problem, const RunOptions& options) {
  const TensorView &a = problem.a, &b = problem.b, &c = problem.c;
  if (detail::has_no_elements(c)) return;  // e.g. C's batch 0 next to an A or B of batch 1: nothing to write
  const int64_t batch = std::max({batch_extent(a), batch_extent(b), batch_extent(c)});
  const int first = c.rank == 3 ? 1 : 0;
  const int64_t M = c.extents[first], N = c.extents[first + 1];
  // BLAS: alpha == 0 reads neither A nor B.
  const int64_t K = problem.alpha == 0.0 ? 0 : problem.transpose_a ? a.extents[a.rank - 2] : a.extents[a.rank - 1];
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  std::vector<double> a_rows(static_cast<size_t>(kBlock * K));     // [row of the block][p]
  std::vector<double> b_columns(static_cast<size_t>(kBlock * K));  // [column of the block][p]
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
      const int64_t columns = std::min(kBlock, N - j0);
      // Column j of op(B) is row j of op(B)^T: the view read with the other transpose.
      widen(b, !problem.transpose_b, bi, j0, columns, K, b_columns.data(), threads);
      for (int64_t i0 = 0; i0 < M; i0 += kBlock) {
        const int64_t rows = std::min(kBlock, M - i0);
        widen(a, problem.transpose_a, bi, i0, rows, K, a_rows.data(), threads);
        // Four sums at a time (four independent chains of additions, each still in ascending p).
        const int64_t quads = (columns + 3) / 4;
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t q = 0; q < quads; ++q) {
            const double* x = a_rows.data() + i * K;
            const int64_t j = 4 * q, count = std::min<int64_t>(4, columns - j);
            const double* y[4];
            for (int64_t u = 0; u < 4; ++u) y[u] = b_columns.data() + std::min(j + u, columns - 1) * K;
            double sum[4] = {0.0, 0.0, 0.0, 0.0};
            for (int64_t p = 0; p < K; ++p) {
              const double xp = x[p];
              sum[0] += xp * y[0][p];
              sum[1] += xp * y[1][p];
              sum[2] += xp * y[2][p];
              sum[3] += xp * y[3][p];
            }
            for (int64_t u = 0; u < count; ++u) {
              double value = problem.alpha * sum[u];
              const int64_t at = offset(c, bi, i0 + i, j0 + j + u);
              if (problem.beta != 0.0) value += problem.beta * detail::load_as_double(c.data, c.dtype, at);
              detail::store_from_double(c.data, c.dtype, at, value);
            }
          }
        }
      }
    }
  }
}

}  // namespace attnkit::cpu::reference
