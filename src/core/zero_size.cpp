#include "core/zero_size.hpp"

#include <limits>
#include <memory>
#include <type_traits>

#include "core/attention_shape.hpp"
#include "core/fill_view.hpp"

namespace attnkit::detail {
namespace {

constexpr double kNoKeyLse = -std::numeric_limits<double>::infinity();

bool no_query_rows(const AttentionShape& shape) { return shape.batch == 0 || shape.seq_q == 0 || shape.heads_q == 0; }

void write_zero_size_result(const AttentionForward& p, const RunOptions& options) {
  fill_view(p.out, 0.0, options);
  if (is_given(p.lse)) fill_view(p.lse, kNoKeyLse, options);
}

void write_zero_size_result(const AttentionBackward& p, const RunOptions& options) {
  fill_view(p.grad_q, 0.0, options);
  fill_view(p.grad_k, 0.0, options);
  fill_view(p.grad_v, 0.0, options);
  if (is_given(p.grad_rpb)) fill_view(p.grad_rpb, 0.0, options);
}

template <class Problem>
class ZeroSizeAttentionPlan final : public OpPlan<Problem> {
 public:
  int64_t workspace_bytes() const override { return 0; }
  void run(const Problem& problem, const RunOptions& options) const override {
    write_zero_size_result(problem, options);
  }
  TunedConfig config() const override { return {"none_zero_size", "default"}; }
};

// B, H, Dk or Dv is 0; or, with a decay matrix [H|1, Tq, Tk], Tq or Tk is 0 (and no state exists).
bool retention_has_no_terms(const TensorView& q, const TensorView& v, const TensorView& decay) {
  return q.extents[0] == 0 || q.extents[2] == 0 || q.extents[3] == 0 || v.extents[3] == 0 ||
         (is_given(decay) && has_no_elements(decay));
}

}  // namespace

bool has_no_elements(const TensorView& view) {
  if (view.rank < 1 || view.rank > kMaxRank) return false;
  for (int i = 0; i < view.rank; ++i) {
    if (view.extents[i] == 0) return true;
  }
  return false;
}

bool is_given(const TensorView& view) { return view.defined() || has_no_elements(view); }

bool attention_forward_needs_no_kernel(const AttentionForward& p) {
  const AttentionShape shape = describe_attention(p.q, p.k, p.v, p.scale);
  return no_query_rows(shape) || shape.seq_k == 0 || (shape.head_dim_v == 0 && !is_given(p.lse));
}

bool attention_backward_needs_no_kernel(const AttentionBackward& p) {
  const AttentionShape shape = describe_attention(p.q, p.k, p.v, p.scale);
  return no_query_rows(shape) || shape.seq_k == 0 || shape.head_dim_v == 0;
}

bool retention_forward_needs_no_kernel(const RetentionForward& p) { return retention_has_no_terms(p.q, p.v, p.decay); }

bool retention_backward_needs_no_kernel(const RetentionBackward& p) {
  return retention_has_no_terms(p.q, p.v, p.decay);
}

bool gemm_needs_no_kernel(const GemmProblem& p) { return has_no_elements(p.c); }

MadePlan<AttentionForward> zero_size_plan(const AttentionForward&) {
  return {std::make_unique<ZeroSizeAttentionPlan<AttentionForward>>()};
}

MadePlan<AttentionBackward> zero_size_plan(const AttentionBackward&) {
  return {std::make_unique<ZeroSizeAttentionPlan<AttentionBackward>>()};
}

void write_zero_size_result(const RetentionForward& p, const RunOptions& options) {
  fill_view(p.out, 0.0, options);  // final_state [B, H, Dk, Dv] has no elements
}

void write_zero_size_result(const RetentionBackward& p, const RunOptions& options) {
  fill_view(p.grad_q, 0.0, options);
  fill_view(p.grad_k, 0.0, options);
  fill_view(p.grad_v, 0.0, options);  // grad_initial_state [B, H, Dk, Dv] has no elements
}

}  // namespace attnkit::detail
