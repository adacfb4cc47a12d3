// Validation of gemm (C = alpha * op(A) * op(B) + beta * C). Each matrix is [rows, cols] or
// [batch, rows, cols], row-major (cols stride 1) or column-major (rows stride 1). op(A) is m x k,
// op(B) is k x n and C is m x n. Batch extents of A and B are the batch or 1 (broadcast); C's is the
// batch, the largest of the three (0 when one of them is 0). allow_tf32 matters only for float32 and is
// never an error.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "core/validate.hpp"
#include "core/validate_checks.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail {
namespace {

using namespace checks;

constexpr const char* kMatrixLayout = "[rows, cols] or [batch, rows, cols]";

struct MatrixExtents {
  int64_t rows = 0;  // of op(X)
  int64_t cols = 0;
};

int64_t batch_of(const TensorView& view) { return view.rank == 3 ? view.extents[0] : 1; }

MatrixExtents op_extents(const TensorView& view, bool transpose) {
  const int64_t rows = view.extents[view.rank - 2];
  const int64_t cols = view.extents[view.rank - 1];
  return transpose ? MatrixExtents{cols, rows} : MatrixExtents{rows, cols};
}

// Any strides for a matrix with no elements: none is read or written.
void check_matrix_unit_stride(const TensorView& view, const char* name) {
  if (!has_no_elements(view) && view.strides[view.rank - 1] != 1 && view.strides[view.rank - 2] != 1) {
    fail(std::string(name) + ": strides " + strides_string(view) + " (shape " + view.shape_string() +
         "); allowed: stride 1 in the last dim (row-major) or in the second-to-last dim (column-major)");
  }
}

std::string op_description(const char* name, const TensorView& view, bool transpose) {
  const auto e = op_extents(view, transpose);
  return std::string("op(") + name + ") = " + std::to_string(e.rows) + " x " + std::to_string(e.cols) + " (shape " +
         view.shape_string() + ", transpose_" + name + "=" + (transpose ? "true" : "false") + ")";
}

void check_inner_dims_agree(const GemmProblem& p) {
  const auto a = op_extents(p.a, p.transpose_a);
  const auto b = op_extents(p.b, p.transpose_b);
  if (b.rows != a.cols) {
    fail("b: " + op_description("b", p.b, p.transpose_b) + "; allowed: " + std::to_string(a.cols) +
         " rows, matching the " + std::to_string(a.cols) + " columns (k) of " +
         op_description("a", p.a, p.transpose_a));
  }
}

void check_output_extents(const GemmProblem& p) {
  const auto a = op_extents(p.a, p.transpose_a);
  const auto b = op_extents(p.b, p.transpose_b);
  const auto c = op_extents(p.c, false);
  if (c.rows != a.rows || c.cols != b.cols) {
    fail("c: " + std::to_string(c.rows) + " x " + std::to_string(c.cols) + " (shape " + p.c.shape_string() +
         "); allowed: " + std::to_string(a.rows) + " x " + std::to_string(b.cols) + ", m x n from op(a) (" +
         std::to_string(a.rows) + " x " + std::to_string(a.cols) + ") and op(b) (" + std::to_string(b.rows) + " x " +
         std::to_string(b.cols) + ")");
  }
}

// The batch of the call: the largest of the three, or 0 when any of them is 0 (an extent 1 broadcasts
// to 0 as to any other batch).
int64_t call_batch(const GemmProblem& p) {
  const int64_t a = batch_of(p.a);
  const int64_t b = batch_of(p.b);
  const int64_t c = batch_of(p.c);
  return (a == 0 || b == 0 || c == 0) ? 0 : std::max({a, b, c});
}

void check_batches(const GemmProblem& p) {
  const int64_t batch = call_batch(p);
  for (const auto& [view, name] : {std::pair{&p.a, "a"}, {&p.b, "b"}}) {
    const int64_t own = batch_of(*view);
    if (own != 1 && own != batch) {
      fail(std::string(name) + ": batch " + std::to_string(own) + " (shape " + view->shape_string() +
           "); allowed: 1 (broadcast) or " + std::to_string(batch) + ", the batch of the call");
    }
  }
  if (batch_of(p.c) != batch) {
    fail("c: batch " + std::to_string(batch_of(p.c)) + " (shape " + p.c.shape_string() +
         "); allowed: " + std::to_string(batch) +
         ", the largest batch of a and b, or 0 when one batch is 0 (c holds every product, it cannot broadcast)");
  }
}

}  // namespace

void validate_gemm(const GemmProblem& p, const RunOptions& options) {
  check_run_options(options);
  const std::array<std::pair<const TensorView*, const char*>, 3> matrices{{{&p.a, "a"}, {&p.b, "b"}, {&p.c, "c"}}};
  for (const auto& [view, name] : matrices) {
    check_present(*view, name);
  }
  for (const auto& [view, name] : matrices) {
    check_view_structure(*view, name, 2, 3, kMatrixLayout);
  }
  check_floating_dtype(p.a, "a");
  check_same_dtype(p.b, "b", p.a, "a");
  check_same_dtype(p.c, "c", p.a, "a");
  check_same_device(p.b, "b", p.a, "a");
  check_same_device(p.c, "c", p.a, "a");
  for (const auto& [view, name] : matrices) {
    check_matrix_unit_stride(*view, name);
    check_aligned(*view, name);
  }
  check_output_not_broadcast(p.c, "c");
  check_inner_dims_agree(p);
  check_output_extents(p);
  check_batches(p);
  check_finite(p.alpha, "alpha");
  check_finite(p.beta, "beta");
}

}  // namespace attnkit::detail
