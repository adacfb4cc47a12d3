// C = alpha * op(A) * op(B) + beta * C. A, B, C are rank-2 [rows, cols] or rank-3
// [batch, rows, cols] views; each matrix may be row-major (cols stride 1) or column-major (rows
// stride 1), so leading dimensions and batch strides come from the views. A batch extent of 1
// broadcasts. op(X) = X^T when transpose_x.
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/export.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

struct GemmProblem {
  TensorView a, b, c;
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  bool allow_tf32 = false;  // fp32 inputs on CUDA may use TF32 tensor cores (relative error ~3e-4)
};

ATTNKIT_API void gemm(const GemmProblem& problem, const RunOptions& options = {});

}  // namespace attnkit
