// GEMM by definition, in double, for `attnkit run --check` and the tests:
// C[b, i, j] = alpha * sum_p op(A)[b, i, p] * op(B)[b, p, j] + beta * C[b, i, j], each sum in ascending p, reading
// every operand through its strides (batch extent 1 broadcasts). beta == 0 does not read C; alpha == 0 reads neither
// A nor B.
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/gemm.hpp"

namespace attnkit::cpu::reference {

void gemm(const GemmProblem& problem, const RunOptions& options = {});

}  // namespace attnkit::cpu::reference
