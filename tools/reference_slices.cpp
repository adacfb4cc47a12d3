#include "reference_slices.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/attention_shape.hpp"
#include "cpu/attention_reference.hpp"
#include "cpu/gemm_reference.hpp"
#include "cpu/retention_reference.hpp"
#include "tensor_slice.hpp"

namespace attnkit::cli {
namespace {

// Short, so that the progress line fits an 80-column terminal.
constexpr const char* kForwardTask = "reference check (forward)";
constexpr const char* kBackwardTask = "reference check (backward)";
// Enough steps for a useful progress line; a block has at least a row per thread, though, since the
// reference spreads a block's rows over the threads.
constexpr int64_t kGemmRowBlocks = 16;

// Entry `batch` and heads [head, head + count) of a [B, *tokens, H, X] tensor (X absent for the LSE,
// whose heads are its last dimension).
TensorView batch_heads(const TensorView& view, int head_dim, int64_t batch, int64_t head, int64_t count) {
  if (!view.defined()) return view;
  return slice(slice(view, 0, batch, 1), head_dim, head, count);
}

TensorView token_major(const TensorView& view, int64_t batch, int64_t head, int64_t count) {
  return batch_heads(view, view.rank - 2, batch, head, count);
}

TensorView lse_heads(const TensorView& view, int64_t batch, int64_t head, int64_t count) {
  return batch_heads(view, view.rank - 1, batch, head, count);
}

// The block or element mask's [B|1, Hq|1, ...] entries of those queries.
AttentionMask mask_for(const AttentionMask& mask, int64_t batch, int64_t head, int64_t count) {
  AttentionMask part = mask;
  for (TensorView* view : {&part.block_mask, &part.element_mask}) {
    if (view->defined()) {
      *view = slice_unless_broadcast(slice_unless_broadcast(*view, 0, batch, 1), 1, head, count);
    }
  }
  return part;
}

// [B, H, Dk, Dv] state of one (batch, head).
TensorView state_of(const TensorView& view, int64_t batch, int64_t head) {
  return view.defined() ? slice(slice(view, 0, batch, 1), 1, head, 1) : view;
}

// Calls work(b, h) for every (batch entry, head) on the OpenMP threads, counting each that finishes.
template <class Work>
void in_parallel_per_batch_and_head(int64_t batch, int64_t heads, ProgressReporter& progress, const Work& work) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < batch * heads; ++i) {
    work(i / heads, i % heads);
    progress.advance();
  }
}

template <class Problem>
using Views = std::initializer_list<TensorView Problem::*>;

// Retention's heads are independent given each head's own decay: a slice is one (batch, head) of the
// [B, T, H, D] tensors `token_major_views` and the [B, H, Dk, Dv] tensors `state_views`.
template <class Problem>
void retention_in_slices(const Problem& problem, const ProgressOutput& output, const char* task,
                         Views<Problem> token_major_views, Views<Problem> state_views,
                         void (*reference)(const Problem&, const RunOptions&)) {
  const int64_t batch = problem.q.extents[0];
  const int64_t heads = problem.q.extents[2];
  const std::vector<double> gamma = problem.gamma.empty() ? default_retention_gamma(heads) : problem.gamma;
  ProgressReporter progress(output, task, batch * heads, "heads");
  in_parallel_per_batch_and_head(batch, heads, progress, [&](int64_t b, int64_t h) {
    Problem part = problem;
    for (auto view : token_major_views) part.*view = token_major(problem.*view, b, h, 1);
    for (auto view : state_views) part.*view = state_of(problem.*view, b, h);
    part.gamma = {gamma[static_cast<std::size_t>(h)]};
    reference(part, {});
  });
}

}  // namespace

void attention_forward_reference_in_slices(const AttentionForward& problem, const ProgressOutput& output) {
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  const int64_t group = shape.heads_q / shape.heads_kv;
  ProgressReporter progress(output, kForwardTask, shape.batch * shape.heads_q, "heads");
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads_q; ++h) {
      AttentionForward part = problem;
      part.q = token_major(problem.q, b, h, 1);
      part.k = token_major(problem.k, b, h / group, 1);
      part.v = token_major(problem.v, b, h / group, 1);
      part.out = token_major(problem.out, b, h, 1);
      part.lse = lse_heads(problem.lse, b, h, 1);
      part.mask = mask_for(problem.mask, b, h, 1);
      cpu::reference::attention_forward_reference(part, detail::describe_attention(part.q, part.k, part.v, part.scale),
                                                  {});
      progress.advance();
    }
  }
}

void attention_backward_reference_in_slices(const AttentionBackward& problem, const ProgressOutput& output) {
  using P = AttentionBackward;
  const auto shape = detail::describe_attention(problem.q, problem.k, problem.v, problem.scale);
  const int64_t group = shape.heads_q / shape.heads_kv;
  ProgressReporter progress(output, kBackwardTask, shape.batch * shape.heads_kv, "kv heads");
  // A kv head's gradients sum over the query heads of its group, so those stay in one slice.
  in_parallel_per_batch_and_head(shape.batch, shape.heads_kv, progress, [&](int64_t b, int64_t kv_head) {
    const int64_t head = kv_head * group;
    P part = problem;
    for (auto view : Views<P>{&P::q, &P::out, &P::grad_out, &P::grad_q}) {
      part.*view = token_major(problem.*view, b, head, group);
    }
    for (auto view : Views<P>{&P::k, &P::v, &P::grad_k, &P::grad_v}) {
      part.*view = token_major(problem.*view, b, kv_head, 1);
    }
    part.lse = lse_heads(problem.lse, b, head, group);
    part.mask = mask_for(problem.mask, b, head, group);
    cpu::reference::attention_backward_reference(part, detail::describe_attention(part.q, part.k, part.v, part.scale),
                                                 {});
  });
}

void retention_forward_reference_in_slices(const RetentionForward& problem, const ProgressOutput& output) {
  using P = RetentionForward;
  retention_in_slices<P>(problem, output, kForwardTask, {&P::q, &P::k, &P::v, &P::out},
                         {&P::initial_state, &P::final_state}, cpu::reference::retention_forward);
}

void retention_backward_reference_in_slices(const RetentionBackward& problem, const ProgressOutput& output) {
  using P = RetentionBackward;
  retention_in_slices<P>(
      problem, output, kBackwardTask, {&P::q, &P::k, &P::v, &P::grad_out, &P::grad_q, &P::grad_k, &P::grad_v},
      {&P::initial_state, &P::grad_final_state, &P::grad_initial_state}, cpu::reference::retention_backward);
}

void gemm_reference_in_slices(const GemmProblem& problem, const ProgressOutput& output) {
  const TensorView &a = problem.a, &b = problem.b, &c = problem.c;
  const int64_t batch = c.rank == 3 ? c.extents[0] : 1;
  const int row_dim = c.rank - 2;
  const int64_t rows = c.extents[static_cast<std::size_t>(row_dim)];
  const int64_t block = std::max<int64_t>((rows + kGemmRowBlocks - 1) / kGemmRowBlocks, omp_get_max_threads());
  const int64_t blocks = (rows + block - 1) / block;
  ProgressReporter progress(output, "reference check", batch * blocks, "row blocks");
  // op(A)'s rows are A's columns when A is transposed.
  const int a_row_dim = problem.transpose_a ? a.rank - 1 : a.rank - 2;
  for (int64_t entry = 0; entry < batch; ++entry) {
    for (int64_t row = 0; row < rows; row += block) {
      const int64_t count = std::min(block, rows - row);
      GemmProblem part = problem;
      part.a = slice(a.rank == 3 ? slice_unless_broadcast(a, 0, entry, 1) : a, a_row_dim, row, count);
      part.b = b.rank == 3 ? slice_unless_broadcast(b, 0, entry, 1) : b;
      part.c = slice(c.rank == 3 ? slice(c, 0, entry, 1) : c, row_dim, row, count);
      cpu::reference::gemm(part);
      progress.advance();
    }
  }
}

}  // namespace attnkit::cli
