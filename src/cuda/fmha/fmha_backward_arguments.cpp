// Capability checks of the CUDA backward and the AttentionBackward -> FmhaBackwardParams translation.
// Checks and token addressing are shared with the forward (fmha_argument_support.hpp): neighborhood masks tile the
// token grid with boxes chosen by choose_box_shapes(); flat masks (none, causal, block, element) use one box dimension
// over the flattened sequence when the token strides of every tensor of a side collapse into one, else decompose mode
// (flat token split by the extents). The query side is q, out, grad_out, grad_q and lse; the key side k, v, grad_k and
// grad_v.
#include "cuda/fmha/fmha_backward_arguments.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "cuda/fmha/fmha_argument_support.hpp"
#include "cuda/fmha/fmha_backward_split.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"

namespace attnkit::cuda::fmha {

FmhaBackwardPolicy fmha_backward_policy_for(MaskKind kind) {
  return kind == MaskKind::block || kind == MaskKind::element ? FmhaBackwardPolicy::tile_list : FmhaBackwardPolicy::box;
}

void check_backward_supported(const AttentionBackward& problem, const detail::AttentionShape& shape) {
  const std::pair<const TensorView*, const char*> tensors[] = {{&problem.q, "q"},
                                                               {&problem.k, "k"},
                                                               {&problem.v, "v"},
                                                               {&problem.out, "out"},
                                                               {&problem.grad_out, "grad_out"},
                                                               {&problem.grad_q, "grad_q"},
                                                               {&problem.grad_k, "grad_k"},
                                                               {&problem.grad_v, "grad_v"}};
  for (const auto& [view, name] : tensors) check_dtype(*view, name);
  check_head_dim_multiple_of_8(shape.head_dim, "q.shape[-1] (head_dim D)");
  check_head_dim_multiple_of_8(shape.head_dim_v, "v.shape[-1] (head_dim_v Dv)");
  if (fmha_backward_compiled_width(problem.q.dtype, shape.head_dim, shape.head_dim_v) == 0) {
    unsupported("head_dim: max(D, Dv) = " + std::to_string(std::max(shape.head_dim, shape.head_dim_v)) + " for " +
                std::string(dtype_name(problem.q.dtype)) +
                " in attention_backward; allowed: the compiled backward widths " + fmha_backward_compiled_summary() +
                " (D and Dv up to 128, multiples of 8), or run on CPU tensors");
  }
  for (const auto& [view, name] : tensors) check_strides_and_alignment(*view, name);
  check_extent_limits(shape, problem.mask.kind);
  check_positional_bias_supported(problem.mask.rpb, "mask.rpb");
  check_positional_bias_supported(problem.grad_rpb, "grad_rpb");
}

FmhaBackwardLaunch make_backward_launch(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                        const FmhaBackwardConfig& config, int multiprocessors) {
  FmhaBackwardLaunch launch;
  launch.deterministic = problem.deterministic;
  FmhaBackwardParams& p = launch.params;
  const int block_m_log2 = log2_exact(config.block_m);
  const int block_n_log2 = log2_exact(config.block_n);
  const int32_t tq = shape.token_dims;
  const int32_t tk = shape.token_dims_kv;
  p.q = address_of(problem.q, tq);
  p.o = address_of(problem.out, tq);
  p.d_o = address_of(problem.grad_out, tq);
  p.d_q = address_of(problem.grad_q, tq);
  p.lse = address_of(problem.lse, tq);
  p.k = address_of(problem.k, tk);
  p.v = address_of(problem.v, tk);
  p.d_k = address_of(problem.grad_k, tk);
  p.d_v = address_of(problem.grad_v, tk);
  p.batch = static_cast<int32_t>(shape.batch);
  p.heads_q = static_cast<int32_t>(shape.heads_q);
  p.heads_kv = static_cast<int32_t>(shape.heads_kv);
  p.heads_per_kv = static_cast<int32_t>(shape.heads_q / shape.heads_kv);
  p.head_dim = static_cast<int32_t>(shape.head_dim);
  p.head_dim_v = static_cast<int32_t>(shape.head_dim_v);
  p.scale = static_cast<float>(shape.scale);
  p.scale_log2 = static_cast<float>(shape.scale * 1.4426950408889634);

  // The Hopper tier's deterministic mode adds dQ in a fixed order over the grid's Q tiles
  // (fmha_backward_dq_order.hpp); otherwise a dK/dV CTA's Q tiles start at the first query that sees its
  // KV tile when that takes fewer tiles (box policies, KvBoxSchedule).
  p.ordered_dq = problem.deterministic && config.architecture == 90;
  p.q_tile_origins = p.ordered_dq ? KvTileOrigin::aligned : KvTileOrigin::window;

  const AttentionMask& mask = problem.mask;
  if (mask.kind == MaskKind::neighborhood) {
    const BoxGeometry geometry = neighborhood_geometry(tq, mask.neighborhood, shape.tokens);
    // Scored by the dK/dV walk; the two MMA warpgroups of the Hopper kernel of 128-key tiles each skip the
    // partial visits that miss their half.
    const bool kv_halves = config.architecture == 90 && config.block_n > 64;
    const BoxShapes shapes =
        choose_backward_box_shapes(geometry, block_m_log2, block_n_log2, kv_halves, p.q_tile_origins);
    p.dims = tq;
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < tq) {
        p.q_space.extent[d] = static_cast<int32_t>(shape.tokens[d]);
        p.kv_space.extent[d] = static_cast<int32_t>(shape.tokens_kv[d]);
        p.q_space.box_log2[d] = shapes.q_log2[d];
        p.kv_space.box_log2[d] = shapes.kv_log2[d];
        p.dilation[d] = static_cast<int32_t>(geometry.dilation[d]);
        p.rule[d] = geometry.rule[d];
        const int64_t q_group = ceil_div(shape.tokens[d], geometry.dilation[d]);
        const int64_t kv_group = ceil_div(shape.tokens_kv[d], geometry.dilation[d]);
        p.q_tiles[d] = static_cast<int32_t>(ceil_div(q_group, int64_t{1} << shapes.q_log2[d]));
        p.kv_tiles[d] = static_cast<int32_t>(ceil_div(kv_group, int64_t{1} << shapes.kv_log2[d]));
      }
    }
    set_box_shifts(p.q_space);
    set_box_shifts(p.kv_space);
    p.rpb = positional_bias_of(mask.rpb, mask, tq);
    if (problem.grad_rpb.defined()) {
      p.grad_rpb = positional_bias_of(problem.grad_rpb, mask, tq);
      p.rpb_entries = 1;
      for (int d = 0; d < tq; ++d) p.rpb_entries *= static_cast<int32_t>(2 * mask.neighborhood[d].kernel_size - 1);
    }
  } else {
    p.dims = 1;
    if (mask.kind == MaskKind::causal) {
      p.rule[0].kind = WindowKind::prefix;
      p.rule[0].prefix_offset = mask.causal_alignment == CausalAlignment::bottom_right ? shape.seq_k - shape.seq_q : 0;
    }
    set_flat_side(p.q_space, block_m_log2, shape.seq_q, tq, shape.tokens,
                  {{&p.q, &problem.q},
                   {&p.o, &problem.out},
                   {&p.d_o, &problem.grad_out},
                   {&p.d_q, &problem.grad_q},
                   {&p.lse, &problem.lse}});
    set_flat_side(p.kv_space, block_n_log2, shape.seq_k, tk, shape.tokens_kv,
                  {{&p.k, &problem.k}, {&p.v, &problem.v}, {&p.d_k, &problem.grad_k}, {&p.d_v, &problem.grad_v}});
    p.q_tiles[0] = static_cast<int32_t>(ceil_div(shape.seq_q, config.block_m));
    p.kv_tiles[0] = static_cast<int32_t>(ceil_div(shape.seq_k, config.block_n));
    if (config.policy == FmhaBackwardPolicy::tile_list) {
      const TensorView& m = mask.kind == MaskKind::block ? mask.block_mask : mask.element_mask;
      BackwardListBuildParams& b = launch.lists;
      b.kind = mask.kind == MaskKind::block ? TileMaskKind::block : TileMaskKind::element;
      b.mask = static_cast<const uint8_t*>(m.data);
      for (int d = 0; d < 4; ++d) b.mask_stride[d] = m.strides[d];
      b.mask_batch = mask_slices(m, 0);
      b.mask_heads = mask_slices(m, 1);
      b.block_q = mask.kind == MaskKind::block ? mask.block_q : 1;
      b.block_k = mask.kind == MaskKind::block ? mask.block_k : 1;
      b.seq_q = static_cast<int32_t>(shape.seq_q);
      b.seq_k = static_cast<int32_t>(shape.seq_k);
      b.q_tiles = p.q_tiles[0];
      b.kv_tiles = p.kv_tiles[0];
      p.use_lists = true;
      BackwardTileLists& l = p.list;
      l.q_tiles = b.q_tiles;
      l.kv_tiles = b.kv_tiles;
      l.mask_batch = b.mask_batch;
      l.mask_heads = b.mask_heads;
      l.kind = b.kind;
      l.mask = b.mask;
      for (int d = 0; d < 4; ++d) l.mask_stride[d] = b.mask_stride[d];
      check_limit(b.block_q, (int64_t{1} << 31) - 1, "mask.block_q");
      check_limit(b.block_k, (int64_t{1} << 31) - 1, "mask.block_k");
      l.block_q = static_cast<int32_t>(b.block_q);
      l.block_k = static_cast<int32_t>(b.block_k);
      check_limit(b.kv_tiles, (int64_t{1} << 31) - 1, "key tiles");
    }
  }
  int64_t total_q = 1;
  int64_t total_kv = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    total_q *= int64_t{p.dilation[d]} * p.q_tiles[d];
    total_kv *= int64_t{p.dilation[d]} * p.kv_tiles[d];
  }
  check_limit(total_q, (int64_t{1} << 31) - 1, "query tiles (grid size)");
  check_limit(total_kv, (int64_t{1} << 31) - 1, "key tiles (grid size)");
  check_limit(shape.heads_kv, kMaxGridYZ, "k: heads");
  p.total_q_tiles = static_cast<int32_t>(total_q);
  p.total_kv_tiles = static_cast<int32_t>(total_kv);

  // The fp32 dQ accumulator of fast mode and of the Hopper tier's deterministic mode (ordered additions,
  // fmha_backward_dq_order.hpp; the portable tier's deterministic mode runs the dQ kernel instead),
  // contiguous [B, Sq, Hq, D]: a token's offset is row-major over the query side's token extents, whichever
  // mode (box, flat, decompose) the side uses.
  p.accumulate_dq = !problem.deterministic || p.ordered_dq;
  if (p.accumulate_dq) {
    const int64_t row = shape.heads_q * shape.head_dim;
    int64_t stride = row;
    for (int d = kMaxDims - 1; d >= 0; --d) {
      p.dq_accum.token_stride[d] = stride;
      stride *= p.q_space.extent[d];
    }
    p.dq_accum.head_stride = shape.head_dim;
    p.dq_accum.batch_stride = shape.seq_q * row;
  }

  // KV-parallel splitting: the same choice in both modes wherever they walk the same visits (dK and dV stay
  // equal between them; the Hopper tier's modes differ only where window origins move some Q tiles). The
  // Hopper dK/dV kernels run one CTA per SM (128-key tiles) or two (64-key tiles), the portable one two.
  p.partial_width = config.head_dim;
  KvSplitInputs split;
  split.ctas = total_kv * p.heads_kv * p.batch;
  split.slots = int64_t{multiprocessors} * config.ctas_per_sm;
  split.partial_bytes = kv_split_partial_bytes(p, config.block_n, config.head_dim);
  split.requested = problem.kv_splits;
  split.workspace_limit = problem.split_workspace_limit;
  // Only a grid of under a few waves can gain; the estimate costs a few binary searches per dimension.
  if (problem.kv_splits == 0 && split.ctas < 4 * split.slots)
    split.visits = backward_visits_per_kv_tile(p, config.policy);
  p.kv_splits = choose_kv_splits(split);
  // Ordered dQ: a CTA waits only for CTAs launched before it (fmha_backward_dq_order.hpp).
  if (p.ordered_dq) {
    p.kv_order.descending = true;
  } else {
    order_kv_tiles_heaviest_first(p, config.policy, split.slots);
  }
  // The Hopper dK/dV kernels that can run several KV heads per CTA do where a box mask makes their visits alike.
  const bool head_independent =
      config.several_heads_per_cta && !p.use_lists && p.kv_splits == 1 && !p.ordered_dq && p.rpb.data == nullptr;
  p.heads_per_cta = fmha_sm90::choose_backward_heads_per_cta(
      p, head_independent, fmha_sm90::CtaSlots{multiprocessors * config.ctas_per_sm, config.ctas_per_sm});
  check_limit(total_kv * p.kv_splits, (int64_t{1} << 31) - 1, "key tiles x kv_splits (grid size)");
  return launch;
}

void rebind_backward_launch(FmhaBackwardLaunch& launch, const AttentionBackward& problem) {
  FmhaBackwardParams& p = launch.params;
  p.q.data = problem.q.data;
  p.k.data = problem.k.data;
  p.v.data = problem.v.data;
  p.o.data = problem.out.data;
  p.d_o.data = problem.grad_out.data;
  p.lse.data = problem.lse.data;
  p.d_q.data = problem.grad_q.data;
  p.d_k.data = problem.grad_k.data;
  p.d_v.data = problem.grad_v.data;
  if (p.rpb.data != nullptr) p.rpb.data = problem.mask.rpb.data;
  if (p.grad_rpb.data != nullptr) p.grad_rpb.data = problem.grad_rpb.data;
  if (p.use_lists) {
    const AttentionMask& mask = problem.mask;
    const auto* data =
        static_cast<const uint8_t*>(mask.kind == MaskKind::block ? mask.block_mask.data : mask.element_mask.data);
    launch.lists.mask = data;
    p.list.mask = data;
  }
}

}  // namespace attnkit::cuda::fmha
