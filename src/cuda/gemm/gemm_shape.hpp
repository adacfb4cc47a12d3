// A validated gemm problem in the one canonical form every GEMM kernel of the CUDA backend computes:
// C[m, n] = alpha * A[m, k] * B[k, n] + beta * C, C row-major (its column stride 1), A and B each
// either K-major (k contiguous) or MN-major, batch strides 0 where the batch broadcasts. A C that is
// column-major is computed transposed, C^T = op(B)^T * op(A)^T (`swapped`), which makes it row-major
// and keeps the number of compiled layouts to the A and B majorness alone (four per type).
// Strides are in elements; a stride of a dimension of extent 1 is never used for addressing and is
// normalised to a packed value so that it does not spoil an otherwise aligned problem.
#pragma once
#include <cstdint>

#include "attnkit/dtype.hpp"
#include "attnkit/gemm.hpp"

namespace attnkit::cuda::gemm {

struct GemmShape {
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0, batch = 0;
  bool swapped = false;       // C^T = op(B)^T op(A)^T is computed: A and B pointers come from B and A
  bool product_zero = false;  // k == 0 or alpha == 0: A and B are never read, C = beta * C
  // A: element (i, p) of batch l at a + l * a_batch + i * a_row + p * a_col; B likewise, C with column
  // stride 1.
  int64_t a_row = 0, a_col = 0, a_batch = 0;
  int64_t b_row = 0, b_col = 0, b_batch = 0;
  int64_t c_row = 0, c_batch = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;

  bool a_k_major() const { return a_col == 1; }  // A row-major
  bool b_k_major() const { return b_row == 1; }  // B column-major
};

// The canonical form of a validated problem whose C has elements (a broadcast B's batch folded into M, below).
GemmShape describe_gemm(const GemmProblem& problem);

// A batch whose B is shared (batch stride 0; x [batch, M, K] @ W [K, N], as torch.matmul folds a 3-D by 2-D
// product) and whose A (K-major) and C rows continue from one batch to the next at their row strides is one
// problem of batch x M rows: batch 1, M multiplied by the batch. Decode's batched tokens then fill the M of one
// grid (the swapped split-K rows take batch-1 problems only) instead of repeating small grids. Other shapes are
// left as they are.
void fold_broadcast_batch(GemmShape& shape);

// `shape` with the data pointers of `problem` (a call with the same plan key).
GemmShape bind_gemm(GemmShape shape, const GemmProblem& problem);

// Whether every address a kernel with `bytes`-wide vector accesses forms is `bytes`-aligned: base
// pointers, the non-unit strides, the batch strides and the contiguous extents.
bool gemm_aligned(const GemmShape& shape, int bytes);

}  // namespace attnkit::cuda::gemm
