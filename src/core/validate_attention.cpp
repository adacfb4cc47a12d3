// Validation of attention_forward / attention_backward (DESIGN §2, §4). Order: run options, presence
// of required tensors, each view's structure, dtypes, devices, contiguity and alignment, then the
// relations between extents (batch, token extents, heads, head dims, output shapes), the scale, the
// backward's KV-split settings and finally the mask. Every rule is a named predicate that throws a
// message naming the argument, the value received and what is allowed; nothing here touches tensor
// memory.
#include <array>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "core/validate.hpp"
#include "core/validate_attention_mask.hpp"
#include "core/validate_checks.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail {
namespace {

using namespace checks;

constexpr int32_t kMinAttentionRank = 3;  // B, H, D plus token dims
constexpr int32_t kMinTokenDims = 1;
constexpr const char* kQLayout = "[B, *tokens_q, Hq, D] with 1 to 3 token dims";
constexpr const char* kKLayout = "[B, *tokens_kv, Hkv, D] with 1 to 3 token dims";
constexpr const char* kVLayout = "[B, *tokens_kv, Hkv, Dv] with 1 to 3 token dims";
constexpr const char* kOutLayout = "[B, *tokens_q, Hq, Dv] with 1 to 3 token dims";
constexpr const char* kLseLayout = "[B, *tokens_q, Hq] (float32) with 1 to 3 token dims";

int64_t heads_of(const TensorView& view) { return view.extents[view.rank - 2]; }
int64_t head_dim_of(const TensorView& view) { return view.extents[view.rank - 1]; }

void check_token_tensor_structure(const TensorView& view, const char* name, const char* layout) {
  check_view_structure(view, name, kMinAttentionRank + kMinTokenDims, kMinAttentionRank + kMaxTokenDims, layout);
}

void check_lse_structure(const TensorView& lse) {
  check_view_structure(lse, "lse", kMinAttentionRank - 1 + kMinTokenDims, kMinAttentionRank - 1 + kMaxTokenDims,
                       kLseLayout);
}

// K and V share [B, *tokens_kv, Hkv]: equal rank and equal token extents.
void check_kv_token_extents_equal(const TensorView& k, const TensorView& v) {
  if (v.rank != k.rank) {
    fail("v: rank " + std::to_string(v.rank) + " (shape " + v.shape_string() + "); allowed: rank " +
         std::to_string(k.rank) + ", equal to k's (" + k.shape_string() + "), as K and V share [B, *tokens_kv, Hkv]");
  }
  for (int d = 1; d < k.rank - 2; ++d) {
    if (v.extents[d] != k.extents[d]) {
      fail("v: tokens_kv[" + std::to_string(d - 1) + "] = " + std::to_string(v.extents[d]) + " (shape " +
           v.shape_string() + "); allowed: " + std::to_string(k.extents[d]) + ", k's token extent (k shape " +
           k.shape_string() + ")");
    }
  }
}

void check_batch_equal(const TensorView& view, const char* name, const TensorView& q) {
  if (view.extents[0] != q.extents[0]) {
    fail(std::string(name) + ": batch " + std::to_string(view.extents[0]) + " (dim 0 of shape " + view.shape_string() +
         "); allowed: " + std::to_string(q.extents[0]) + ", q's batch");
  }
}

void check_kv_heads_equal(const TensorView& k, const TensorView& v) {
  if (heads_of(v) != heads_of(k)) {
    fail("v: heads " + std::to_string(heads_of(v)) + " (shape " + v.shape_string() +
         "); allowed: " + std::to_string(heads_of(k)) + ", k's heads (Hkv is shared by K and V)");
  }
}

// Hkv = 0 serves only Hq = 0 (no query head needs a key head).
void check_heads_divisible(const TensorView& q, const TensorView& k) {
  const int64_t hq = heads_of(q);
  const int64_t hkv = heads_of(k);
  if (hkv == 0 ? hq != 0 : hq % hkv != 0) {
    fail("k: heads " + std::to_string(hkv) + " (Hkv, shape " + k.shape_string() + ") does not divide q's heads " +
         std::to_string(hq) +
         " (Hq); allowed: Hkv dividing Hq (Hq % Hkv == 0; Hkv = Hq, grouped-query or Hkv = 1), Hkv = 0 only with "
         "Hq = 0");
  }
}

void check_head_dim_equal(const TensorView& q, const TensorView& k) {
  if (head_dim_of(k) != head_dim_of(q)) {
    fail("k: head_dim " + std::to_string(head_dim_of(k)) + " (shape " + k.shape_string() +
         "); allowed: " + std::to_string(head_dim_of(q)) + ", q's head_dim D (scores are q . k)");
  }
}

// [B, *tokens_q, Hq, Dv] for out / grad_out; [B, *tokens_q, Hq] for lse.
std::vector<int64_t> output_extents(const TensorView& q, const TensorView& v) {
  std::vector<int64_t> extents(q.extents.begin(), q.extents.begin() + q.rank);
  extents.back() = head_dim_of(v);
  return extents;
}

std::vector<int64_t> lse_extents(const TensorView& q) {
  return std::vector<int64_t>(q.extents.begin(), q.extents.begin() + q.rank - 1);
}

std::vector<int64_t> extents_of(const TensorView& view) {
  return std::vector<int64_t>(view.extents.begin(), view.extents.begin() + view.rank);
}

// The rules shared by forward and backward on q, k, v (already present and well-formed).
void check_qkv_relations(const TensorView& q, const TensorView& k, const TensorView& v) {
  check_kv_token_extents_equal(k, v);
  check_batch_equal(k, "k", q);
  check_batch_equal(v, "v", q);
  check_kv_heads_equal(k, v);
  check_heads_divisible(q, k);
  check_head_dim_equal(q, k);
}

void check_floating_family(const TensorView& q, std::initializer_list<std::pair<const TensorView*, const char*>> rest) {
  check_floating_dtype(q, "q");
  for (const auto& [view, name] : rest) {
    check_same_dtype(*view, name, q, "q");
  }
}

void check_lse_dtype(const TensorView& lse) {
  check_dtype_is(lse, "lse", DType::f32, "the log-sum-exp is always float32, natural log");
}

void check_memory_layout(const TensorView& view, const char* name) {
  check_last_dim_contiguous(view, name);
  check_aligned(view, name);
}

constexpr const char* kScaleDefault = "1/sqrt(head_dim)";

// Checked on every backend although only CUDA reads them, so a setting is valid or not independent
// of where the call runs.
void check_kv_splits(int32_t kv_splits) {
  if (kv_splits < 0 || kv_splits > kMaxBackwardKvSplits) {
    fail("kv_splits: " + std::to_string(kv_splits) + "; allowed: 0 (automatic), 1 (never split) or 2 to " +
         std::to_string(kMaxBackwardKvSplits) + " (kMaxBackwardKvSplits) CTAs per KV tile");
  }
}

void check_split_workspace_limit(int64_t limit) {
  if (limit < -1) {
    fail("split_workspace_limit: " + std::to_string(limit) + "; allowed: -1 (the default bound, " +
         std::to_string(kDefaultSplitWorkspaceBytes) + " bytes), 0 (never split automatically) or a byte count > 0");
  }
}

}  // namespace

void validate_attention_forward(const AttentionForward& problem, const RunOptions& options) {
  check_run_options(options);
  const TensorView& q = problem.q;
  const TensorView& k = problem.k;
  const TensorView& v = problem.v;
  const TensorView& out = problem.out;
  const TensorView& lse = problem.lse;
  check_present(q, "q");
  check_present(k, "k");
  check_present(v, "v");
  check_present(out, "out");

  check_token_tensor_structure(q, "q", kQLayout);
  check_token_tensor_structure(k, "k", kKLayout);
  check_token_tensor_structure(v, "v", kVLayout);
  check_token_tensor_structure(out, "out", kOutLayout);
  if (is_given(lse)) {
    check_lse_structure(lse);
  }

  check_floating_family(q, {{&k, "k"}, {&v, "v"}, {&out, "out"}});
  if (is_given(lse)) {
    check_lse_dtype(lse);
  }

  check_same_device(k, "k", q, "q");
  check_same_device(v, "v", q, "q");
  check_same_device(out, "out", q, "q");
  if (is_given(lse)) {
    check_same_device(lse, "lse", q, "q");
  }

  for (const auto& [view, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    check_memory_layout(*view, name);
  }
  if (is_given(lse)) {
    check_memory_layout(lse, "lse");
  }
  check_output_not_broadcast(out, "out");
  if (is_given(lse)) {
    check_output_not_broadcast(lse, "lse");
  }

  check_qkv_relations(q, k, v);
  check_shape_equals(out, "out", output_extents(q, v), "[B, *tokens_q, Hq, Dv] from q and v");
  if (is_given(lse)) {
    check_shape_equals(lse, "lse", lse_extents(q), "[B, *tokens_q, Hq] from q");
  }

  check_scale(problem.scale, kScaleDefault);
  validate_attention_mask(problem.mask, q, k);
}

void validate_attention_backward(const AttentionBackward& problem, const RunOptions& options) {
  check_run_options(options);
  const auto& p = problem;
  const std::array<std::pair<const TensorView*, const char*>, 8> token_tensors{{{&p.q, "q"},
                                                                                {&p.k, "k"},
                                                                                {&p.v, "v"},
                                                                                {&p.out, "out"},
                                                                                {&p.grad_out, "grad_out"},
                                                                                {&p.grad_q, "grad_q"},
                                                                                {&p.grad_k, "grad_k"},
                                                                                {&p.grad_v, "grad_v"}}};
  for (const auto& [view, name] : token_tensors) {
    check_present(*view, name);
  }
  check_present(p.lse, "lse");

  const std::array<const char*, 8> layouts{kQLayout,   kKLayout, kVLayout, kOutLayout,
                                           kOutLayout, kQLayout, kKLayout, kVLayout};
  for (std::size_t i = 0; i < token_tensors.size(); ++i) {
    check_token_tensor_structure(*token_tensors[i].first, token_tensors[i].second, layouts[i]);
  }
  check_lse_structure(p.lse);

  check_floating_family(p.q, {{&p.k, "k"},
                              {&p.v, "v"},
                              {&p.out, "out"},
                              {&p.grad_out, "grad_out"},
                              {&p.grad_q, "grad_q"},
                              {&p.grad_k, "grad_k"},
                              {&p.grad_v, "grad_v"}});
  check_lse_dtype(p.lse);

  for (std::size_t i = 1; i < token_tensors.size(); ++i) {
    check_same_device(*token_tensors[i].first, token_tensors[i].second, p.q, "q");
  }
  check_same_device(p.lse, "lse", p.q, "q");

  for (const auto& [view, name] : token_tensors) {
    check_memory_layout(*view, name);
  }
  check_memory_layout(p.lse, "lse");
  check_output_not_broadcast(p.grad_q, "grad_q");
  check_output_not_broadcast(p.grad_k, "grad_k");
  check_output_not_broadcast(p.grad_v, "grad_v");

  check_qkv_relations(p.q, p.k, p.v);
  const auto out_extents = output_extents(p.q, p.v);
  check_shape_equals(p.out, "out", out_extents, "[B, *tokens_q, Hq, Dv] from q and v");
  check_shape_equals(p.grad_out, "grad_out", out_extents, "[B, *tokens_q, Hq, Dv], the shape of out");
  check_shape_equals(p.lse, "lse", lse_extents(p.q), "[B, *tokens_q, Hq] from q");
  check_shape_equals(p.grad_q, "grad_q", extents_of(p.q), "q's shape");
  check_shape_equals(p.grad_k, "grad_k", extents_of(p.k), "k's shape");
  check_shape_equals(p.grad_v, "grad_v", extents_of(p.v), "v's shape");

  check_scale(p.scale, kScaleDefault);
  check_kv_splits(p.kv_splits);
  check_split_workspace_limit(p.split_workspace_limit);
  validate_attention_mask(p.mask, p.q, p.k);
  validate_positional_bias_gradient(p.grad_rpb, p.mask);
}

}  // namespace attnkit::detail
