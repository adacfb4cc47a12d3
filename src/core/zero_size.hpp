// Zero-size problems (an extent 0 in batch, tokens, heads or a head dim; DESIGN §4). A tensor with no
// elements needs no memory, so its data pointer may be null. A problem whose result the definition
// fixes without reading any input "needs no kernel": the entry point returns after validation, having
// written only the outputs that still have elements (zeros, and -inf for the LSE of rows with no key).
// The other zero-size problems (attention with head_dim 0 or with Dv = 0 and an LSE, retention with
// T = 0, gemm with k = 0) read inputs and go to the backend like any other call.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/op_plan.hpp"

namespace attnkit::detail {

// Rank 1 to kMaxRank with some extent 0.
bool has_no_elements(const TensorView& view);
// An argument is given when it has data or has no elements; a default view (null, rank 0) is absent.
bool is_given(const TensorView& view);

// Each predicate takes a validated problem.
// Attention forward: no query row (B, tokens_q or Hq is 0), no key (tokens_kv is 0: every row gets
// output 0 and LSE -inf), or Dv = 0 without an LSE.
bool attention_forward_needs_no_kernel(const AttentionForward& problem);
// Attention backward: no query row, no key, or Dv = 0 (grad_out has no elements): every gradient is 0.
bool attention_backward_needs_no_kernel(const AttentionBackward& problem);
// Retention: B, H, Dk or Dv is 0. Outputs are 0 (out = scale * q S has no terms when Dk = 0); the
// states have no elements.
bool retention_forward_needs_no_kernel(const RetentionForward& problem);
bool retention_backward_needs_no_kernel(const RetentionBackward& problem);
// GEMM: C has no elements.
bool gemm_needs_no_kernel(const GemmProblem& problem);

// The plan of an attention call that needs no kernel: no workspace; a run writes the outputs the
// definition fixes (out 0 and LSE -inf; every gradient 0), on options.stream for CUDA tensors.
MadePlan<AttentionForward> zero_size_plan(const AttentionForward& problem);
MadePlan<AttentionBackward> zero_size_plan(const AttentionBackward& problem);

void write_zero_size_result(const RetentionForward& problem, const RunOptions& options);
void write_zero_size_result(const RetentionBackward& problem, const RunOptions& options);

}  // namespace attnkit::detail
