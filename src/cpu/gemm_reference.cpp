// Triple-loop double GEMM (see gemm_reference.hpp). Deliberately shares no indexing code with the
// fast path: op(X)[b, r, c] is read as X[b, r, c] or X[b, c, r] straight from the view. Rows of C
// are spread over OpenMP threads only so that checking a large problem stays bearable.
#include "cpu/gemm_reference.hpp"

#include <omp.h>

#include <algorithm>

#include "core/float_convert.hpp"
#include "core/zero_size.hpp"

namespace attnkit::cpu::reference {
namespace {

int64_t batch_extent(const TensorView& x) { return x.rank == 3 ? x.extents[0] : 1; }

// Element [row, col] of matrix `batch` of a rank-2 or rank-3 view (batch extent 1 broadcasts).
int64_t offset(const TensorView& x, int64_t batch, int64_t row, int64_t col) {
  if (x.rank == 2) return row * x.strides[0] + col * x.strides[1];
  return (x.extents[0] == 1 ? 0 : batch) * x.strides[0] + row * x.strides[1] + col * x.strides[2];
}

double op_element(const TensorView& x, bool transpose, int64_t batch, int64_t row, int64_t col) {
  return detail::load_as_double(x.data, x.dtype, transpose ? offset(x, batch, col, row) : offset(x, batch, row, col));
}

}  // namespace

void gemm(const GemmProblem& problem, const RunOptions& options) {
  const TensorView &a = problem.a, &b = problem.b, &c = problem.c;
  if (detail::has_no_elements(c)) return;  // e.g. C's batch 0 next to an A or B of batch 1: nothing to write
  const int64_t batch = std::max({batch_extent(a), batch_extent(b), batch_extent(c)});
  const int first = c.rank == 3 ? 1 : 0;
  const int64_t M = c.extents[first], N = c.extents[first + 1];
  const int64_t K = problem.transpose_a ? a.extents[a.rank - 2] : a.extents[a.rank - 1];
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < K && problem.alpha != 0.0; ++p) {  // BLAS: alpha == 0 reads neither A nor B
          sum += op_element(a, problem.transpose_a, bi, i, p) * op_element(b, problem.transpose_b, bi, p, j);
        }
        double value = problem.alpha * sum;
        if (problem.beta != 0.0) value += problem.beta * detail::load_as_double(c.data, c.dtype, offset(c, bi, i, j));
        detail::store_from_double(c.data, c.dtype, offset(c, bi, i, j), value);
      }
    }
  }
}

}  // namespace attnkit::cpu::reference
