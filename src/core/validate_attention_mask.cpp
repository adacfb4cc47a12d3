// Mask rules (DESIGN §3). Neighborhood masks need Q and KV on one token grid and, per dimension,
// 1 <= kernel_size, dilation >= 1, kernel_size*dilation <= extent (waived for an extent 0, which has
// no token), 1 <= stride <= kernel_size.
// Block and element masks are bool [B|1, Hq|1, rows, cols] on q's device, where rows/cols count
// blocks or tokens of the flattened sequences; for them (and for none/causal) Q and KV may have
// different token ranks.
#include "core/validate_attention_mask.hpp"

#include <span>
#include <string>
#include <vector>

#include "core/validate_checks.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail {
namespace {

using namespace checks;

int32_t token_dims_of(const TensorView& view) { return view.rank - 3; }

int64_t sequence_length(const TensorView& view) {
  int64_t length = 1;
  for (int d = 1; d < view.rank - 2; ++d) {
    length *= view.extents[d];  // fits: view passed the overflow check
  }
  return length;
}

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

void check_mask_kind(const AttentionMask& mask) {
  const auto kind = static_cast<int32_t>(mask.kind);
  if (kind < static_cast<int32_t>(MaskKind::none) || kind > static_cast<int32_t>(MaskKind::element)) {
    fail("mask.kind: " + std::to_string(kind) +
         "; allowed: 0 (none), 1 (causal), 2 (neighborhood), 3 (block), 4 (element)");
  }
}

void check_causal_alignment(const AttentionMask& mask) {
  const auto alignment = static_cast<int32_t>(mask.causal_alignment);
  if (alignment != static_cast<int32_t>(CausalAlignment::top_left) &&
      alignment != static_cast<int32_t>(CausalAlignment::bottom_right)) {
    fail("mask.causal_alignment: " + std::to_string(alignment) + "; allowed: 0 (top_left) or 1 (bottom_right)");
  }
}

// element_path (ElementMaskPath): in range, and other than automatic only for an element mask, the only
// kind it chooses a path for.
void check_element_path(const AttentionMask& mask) {
  const auto path = static_cast<int32_t>(mask.element_path);
  if (path < static_cast<int32_t>(ElementMaskPath::automatic) ||
      path > static_cast<int32_t>(ElementMaskPath::scattered)) {
    fail("mask.element_path: " + std::to_string(path) + "; allowed: 0 (automatic), 1 (tiles), 2 (scattered)");
  }
  if (mask.element_path != ElementMaskPath::automatic && mask.kind != MaskKind::element) {
    fail("mask.element_path: " + std::to_string(path) + " with mask.kind " +
         std::to_string(static_cast<int32_t>(mask.kind)) +
         "; allowed: 0 (automatic) unless mask.kind is 4 (element), the only kind with a choice of paths");
  }
}

// --- neighborhood ----------------------------------------------------------------------------

void check_neighborhood_dims(const AttentionMask& mask, const TensorView& q) {
  if (mask.dims != token_dims_of(q)) {
    fail("mask.dims: " + std::to_string(mask.dims) + "; allowed: " + std::to_string(token_dims_of(q)) +
         ", the number of token dimensions of q (shape " + q.shape_string() + ")");
  }
}

void check_neighborhood_kv_tokens(const TensorView& q, const TensorView& k) {
  bool same = k.rank == q.rank;
  for (int d = 1; same && d < q.rank - 2; ++d) {
    same = k.extents[d] == q.extents[d];
  }
  if (!same) {
    const std::vector<int64_t> q_tokens(q.extents.begin() + 1, q.extents.begin() + q.rank - 2);
    const std::vector<int64_t> k_tokens(k.extents.begin() + 1, k.extents.begin() + k.rank - 2);
    fail("k: tokens_kv " + extents_string(k_tokens) + " (shape " + k.shape_string() +
         "); allowed: " + extents_string(q_tokens) +
         ", q's token extents: neighborhood attention pairs queries and keys on one token grid");
  }
}

std::string dim_field(int d, const char* field) { return "mask.neighborhood[" + std::to_string(d) + "]." + field; }

void check_kernel_size_positive(const NeighborhoodDim& nd, int d) {
  if (nd.kernel_size < 1) {
    fail(dim_field(d, "kernel_size") + ": " + std::to_string(nd.kernel_size) + "; allowed: kernel_size >= 1");
  }
}

void check_dilation_positive(const NeighborhoodDim& nd, int d) {
  if (nd.dilation < 1) {
    fail(dim_field(d, "dilation") + ": " + std::to_string(nd.dilation) + "; allowed: dilation >= 1");
  }
}

// A dimension of extent 0 holds no query and no key: there is no window to place, so any window fits.
void check_neighborhood_extent(const NeighborhoodDim& nd, int d, int64_t extent) {
  int64_t span = 0;
  const bool overflow = __builtin_mul_overflow(nd.kernel_size, nd.dilation, &span);
  if (extent != 0 && (overflow || span > extent)) {
    const std::string spans = overflow ? "more than int64 holds" : std::to_string(span);
    fail(dim_field(d, "kernel_size") + ": " + std::to_string(nd.kernel_size) + " with dilation " +
         std::to_string(nd.dilation) + " spans " + spans + " tokens but tokens[" + std::to_string(d) + "] is " +
         std::to_string(extent) +
         "; allowed: kernel_size*dilation <= extent (an extent 0 has no tokens and takes any kernel_size)");
  }
}

void check_stride_in_range(const NeighborhoodDim& nd, int d) {
  if (nd.stride < 1 || nd.stride > nd.kernel_size) {
    fail(dim_field(d, "stride") + ": " + std::to_string(nd.stride) + "; allowed: 1 <= stride <= kernel_size (" +
         std::to_string(nd.kernel_size) + ")");
  }
}

void check_neighborhood(const AttentionMask& mask, const TensorView& q, const TensorView& k) {
  check_neighborhood_dims(mask, q);
  check_neighborhood_kv_tokens(q, k);
  for (int d = 0; d < mask.dims; ++d) {
    const auto& nd = mask.neighborhood[d];
    check_kernel_size_positive(nd, d);
    check_dilation_positive(nd, d);
    check_neighborhood_extent(nd, d, q.extents[1 + d]);
    check_stride_in_range(nd, d);
  }
}

// --- relative positional bias ----------------------------------------------------------------

// rpb [Hq, 2*K_0-1, ...]: float32 or q's dtype, on q's device, for a neighborhood with stride 1 and no
// causal dimension (NATTEN <= 0.17's positional bias).
void check_positional_bias(const AttentionMask& mask, const TensorView& q) {
  const TensorView& rpb = mask.rpb;
  const int32_t rank = 1 + mask.dims;
  std::string layout = "[Hq";
  std::vector<int64_t> expected{q.extents[q.rank - 2]};
  for (int d = 0; d < mask.dims; ++d) {
    layout += ", 2*K_" + std::to_string(d) + "-1";
    expected.push_back(2 * mask.neighborhood[d].kernel_size - 1);
  }
  layout += "]";
  check_view_structure(rpb, "mask.rpb", rank, rank, layout);
  check_floating_dtype(rpb, "mask.rpb");
  if (rpb.dtype != DType::f32 && rpb.dtype != q.dtype) {
    fail("mask.rpb: dtype " + dtype_string(rpb.dtype) + "; allowed: float32 or q's dtype (" + dtype_string(q.dtype) +
         ")");
  }
  check_same_device(rpb, "mask.rpb", q, "q");
  check_aligned(rpb, "mask.rpb");
  check_shape_equals(rpb, "mask.rpb", expected, layout + " from q's heads and the kernel sizes");
  for (int d = 0; d < mask.dims; ++d) {
    const NeighborhoodDim& nd = mask.neighborhood[d];
    if (nd.stride != 1 || nd.causal) {
      fail("mask.rpb: given with " + dim_field(d, nd.causal ? "causal" : "stride") + " = " +
           (nd.causal ? std::string("true") : std::to_string(nd.stride)) +
           "; allowed: a positional bias only with stride 1 and no causal dimension (NATTEN's rpb semantics)");
    }
  }
}

void check_no_positional_bias(const AttentionMask& mask) {
  if (is_given(mask.rpb)) {
    fail("mask.rpb: given with mask.kind " + std::to_string(static_cast<int32_t>(mask.kind)) +
         "; allowed: a positional bias only with neighborhood masks (kind 2)");
  }
}

// --- block and element masks -----------------------------------------------------------------

// A bool [B|1, Hq|1, rows, cols] mask tensor on q's device.
void check_mask_tensor(const TensorView& view, const char* name, const TensorView& q, int64_t rows, int64_t cols,
                       const char* layout) {
  check_present(view, name);
  check_view_structure(view, name, 4, 4, layout);
  check_dtype_is(view, name, DType::boolean, "true = attend");
  check_same_device(view, name, q, "q");
  check_last_dim_contiguous(view, name);
  const int64_t batch = q.extents[0];
  const int64_t heads = q.extents[q.rank - 2];
  const bool batch_ok = view.extents[0] == batch || view.extents[0] == 1;
  const bool heads_ok = view.extents[1] == heads || view.extents[1] == 1;
  if (!batch_ok || !heads_ok || view.extents[2] != rows || view.extents[3] != cols) {
    fail(std::string(name) + ": shape " + view.shape_string() + "; allowed: [" + std::to_string(batch) + " or 1, " +
         std::to_string(heads) + " or 1, " + std::to_string(rows) + ", " + std::to_string(cols) + "] = " + layout);
  }
}

void check_block_size(int64_t value, const char* name) {
  if (value < 1) {
    fail(std::string(name) + ": " + std::to_string(value) + "; allowed: a block size >= 1");
  }
}

void check_block_mask(const AttentionMask& mask, const TensorView& q, const TensorView& k) {
  check_block_size(mask.block_q, "mask.block_q");
  check_block_size(mask.block_k, "mask.block_k");
  check_mask_tensor(mask.block_mask, "mask.block_mask", q, ceil_div(sequence_length(q), mask.block_q),
                    ceil_div(sequence_length(k), mask.block_k),
                    "[B|1, Hq|1, ceil(Sq/block_q), ceil(Sk/block_k)] (bool)");
}

void check_element_mask(const AttentionMask& mask, const TensorView& q, const TensorView& k) {
  check_mask_tensor(mask.element_mask, "mask.element_mask", q, sequence_length(q), sequence_length(k),
                    "[B|1, Hq|1, Sq, Sk] (bool)");
}

}  // namespace

void validate_attention_mask(const AttentionMask& mask, const TensorView& q, const TensorView& k) {
  check_mask_kind(mask);
  check_causal_alignment(mask);
  check_element_path(mask);
  if (mask.kind != MaskKind::neighborhood) check_no_positional_bias(mask);
  switch (mask.kind) {
    case MaskKind::none:
    case MaskKind::causal: return;
    case MaskKind::neighborhood:
      check_neighborhood(mask, q, k);
      if (is_given(mask.rpb)) check_positional_bias(mask, q);
      return;
    case MaskKind::block: check_block_mask(mask, q, k); return;
    case MaskKind::element: check_element_mask(mask, q, k); return;
  }
}

void validate_positional_bias_gradient(const TensorView& grad_rpb, const AttentionMask& mask) {
  if (!is_given(grad_rpb)) return;
  if (!is_given(mask.rpb)) {
    fail("grad_rpb: given without mask.rpb; allowed: a positional-bias gradient only for a mask with rpb");
  }
  check_view_structure(grad_rpb, "grad_rpb", mask.rpb.rank, mask.rpb.rank, "mask.rpb's shape");
  check_same_dtype(grad_rpb, "grad_rpb", mask.rpb, "mask.rpb");
  check_same_device(grad_rpb, "grad_rpb", mask.rpb, "mask.rpb");
  check_aligned(grad_rpb, "grad_rpb");
  check_shape_equals(grad_rpb, "grad_rpb", std::span<const int64_t>(mask.rpb.extents.data(), mask.rpb.rank),
                     "mask.rpb's shape");
  check_output_not_broadcast(grad_rpb, "grad_rpb");
}

}  // namespace attnkit::detail
