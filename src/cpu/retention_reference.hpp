// Brute-force retention by its definition, in double, for `attnkit run --check` and the tests.
// Reads the views element by element (any dtype, any strides); slow on purpose and obviously right:
//   o_t = scale * sum_{m<=t} gamma^(t-m) (q_t . k_m) v_m + scale * gamma^(t+1) q_t S_{-1},
//   final = gamma^T S_{-1} + sum_m gamma^(T-1-m) k_m^T v_m,
// or RetNet's normalised parallel form when problem.normalize. The mode and chunk size are ignored
// (every form computes the same function). Backward evaluates the closed-form gradients of the same
// expressions as literal sums.
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/retention.hpp"

namespace attnkit::cpu::reference {

void retention_forward(const RetentionForward& problem, const RunOptions& options = {});
void retention_backward(const RetentionBackward& problem, const RunOptions& options = {});

}  // namespace attnkit::cpu::reference
