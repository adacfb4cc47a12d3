#include "cuda/fmha/fmha_arguments.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/fmha/fmha_argument_support.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"

namespace attnkit::cuda::fmha {
namespace {

void set_tile_list_source(TileListBuildParams& b, const AttentionMask& mask, const detail::AttentionShape& shape) {
  const TensorView& m = mask.kind == MaskKind::block ? mask.block_mask : mask.element_mask;
  b.kind = mask.kind == MaskKind::block ? TileMaskKind::block : TileMaskKind::element;
  b.mask = static_cast<const uint8_t*>(m.data);
  for (int d = 0; d < 4; ++d) b.mask_stride[d] = m.strides[d];
  b.mask_batch = mask_slices(m, 0);
  b.mask_heads = mask_slices(m, 1);
  b.block_q = mask.kind == MaskKind::block ? mask.block_q : 1;
  b.block_k = mask.kind == MaskKind::block ? mask.block_k : 1;
  b.seq_q = static_cast<int32_t>(shape.seq_q);
  b.seq_k = static_cast<int32_t>(shape.seq_k);
}

}  // namespace

FmhaPolicyKind fmha_policy_for(MaskKind kind) {
  return kind == MaskKind::block || kind == MaskKind::element ? FmhaPolicyKind::tile_list : FmhaPolicyKind::box;
}

void check_forward_supported(const AttentionForward& problem, const detail::AttentionShape& shape) {
  check_dtype(problem.q, "q");
  check_dtype(problem.k, "k");
  check_dtype(problem.v, "v");
  check_dtype(problem.out, "out");
  check_head_dim_multiple_of_8(shape.head_dim, "q.shape[-1] (head_dim D)");
  check_head_dim_multiple_of_8(shape.head_dim_v, "v.shape[-1] (head_dim_v Dv)");
  if (fmha_compiled_width(problem.q.dtype, shape.head_dim, shape.head_dim_v) == 0) {
    unsupported("head_dim: max(D, Dv) = " + std::to_string(std::max(shape.head_dim, shape.head_dim_v)) + " for " +
                std::string(dtype_name(problem.q.dtype)) +
                "; allowed: up to the largest compiled head dim of this build: " + fmha_compiled_summary() +
                " (a build with -DATTNKIT_KERNEL_SET=full compiles 32, 64, 128 and 256), or run on CPU tensors");
  }
  check_strides_and_alignment(problem.q, "q");
  check_strides_and_alignment(problem.k, "k");
  check_strides_and_alignment(problem.v, "v");
  check_strides_and_alignment(problem.out, "out");
  check_extent_limits(shape, problem.mask.kind);
  check_positional_bias_supported(problem.mask.rpb, "mask.rpb");
}

FmhaLaunch make_forward_launch(const AttentionForward& problem, const detail::AttentionShape& shape,
                               const FmhaConfig& config) {
  FmhaLaunch launch;
  FmhaParams& p = launch.params;
  const int block_m_log2 = log2_exact(config.block_m);
  const int block_n_log2 = log2_exact(config.block_n);
  const bool power_of_two_rows = fmha_query_tiles_are_power_of_two(config);
  p.q = address_of(problem.q, shape.token_dims);
  p.o = address_of(problem.out, shape.token_dims);
  if (problem.lse.defined()) p.lse = address_of(problem.lse, shape.token_dims);
  p.k = address_of(problem.k, shape.token_dims_kv);
  p.v = address_of(problem.v, shape.token_dims_kv);
  p.batch = static_cast<int32_t>(shape.batch);
  p.heads_q = static_cast<int32_t>(shape.heads_q);
  p.heads_per_kv = static_cast<int32_t>(shape.heads_q / shape.heads_kv);
  p.head_dim = static_cast<int32_t>(shape.head_dim);
  p.head_dim_v = static_cast<int32_t>(shape.head_dim_v);
  p.scale_log2 = static_cast<float>(shape.scale * 1.4426950408889634);

  const AttentionMask& mask = problem.mask;
  if (mask.kind == MaskKind::neighborhood) {
    if (!fmha_config_serves_neighborhood(config, shape.token_dims)) {
      unsupported("kernel " + fmha_config_name(config) + ": query tiles of " + std::to_string(config.block_m) +
                  " rows serve dense, causal and 1-D neighborhood masks; a neighborhood over " +
                  std::to_string(shape.token_dims) +
                  " dimensions needs a kernel whose query tiles are a power of two rows (unset ATTNKIT_FMHA_CONFIG "
                  "or name another kernel)");
    }
    const BoxGeometry geometry = neighborhood_geometry(shape.token_dims, mask.neighborhood, shape.tokens);
    // BoxPolicy starts KV tiles at the window's first key: shapes scored by the tiles it will visit.
    const BoxShapes shapes = choose_box_shapes(geometry, block_m_log2, block_n_log2, false, KvTileOrigin::window);
    p.dims = shape.token_dims;
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < shape.token_dims) {
        p.q_space.extent[d] = static_cast<int32_t>(shape.tokens[d]);
        p.kv_space.extent[d] = static_cast<int32_t>(shape.tokens_kv[d]);
        p.q_space.box_log2[d] = shapes.q_log2[d];
        p.kv_space.box_log2[d] = shapes.kv_log2[d];
        p.dilation[d] = static_cast<int32_t>(geometry.dilation[d]);
        p.rule[d] = geometry.rule[d];
        const int64_t group_size = ceil_div(shape.tokens[d], geometry.dilation[d]);
        // Query tiles of a power of two rows are the boxes; others (1-D only) hold the first block_m of theirs.
        const int64_t tile_rows = power_of_two_rows ? int64_t{1} << shapes.q_log2[d] : config.block_m;
        p.q_tiles[d] = static_cast<int32_t>(ceil_div(group_size, tile_rows));
      }
    }
    set_box_shifts(p.q_space);
    set_box_shifts(p.kv_space);
    p.rpb = positional_bias_of(mask.rpb, mask, shape.token_dims);
  } else {
    p.dims = 1;
    if (mask.kind == MaskKind::causal) {
      p.rule[0].kind = WindowKind::prefix;
      p.rule[0].prefix_offset = mask.causal_alignment == CausalAlignment::bottom_right ? shape.seq_k - shape.seq_q : 0;
    }
    if (problem.lse.defined()) {
      set_flat_side(p.q_space, block_m_log2, shape.seq_q, shape.token_dims, shape.tokens,
                    {{&p.q, &problem.q}, {&p.o, &problem.out}, {&p.lse, &problem.lse}});
    } else {
      set_flat_side(p.q_space, block_m_log2, shape.seq_q, shape.token_dims, shape.tokens,
                    {{&p.q, &problem.q}, {&p.o, &problem.out}});
    }
    set_flat_side(p.kv_space, block_n_log2, shape.seq_k, shape.token_dims_kv, shape.tokens_kv,
                  {{&p.k, &problem.k}, {&p.v, &problem.v}});
    p.q_tiles[0] = static_cast<int32_t>(ceil_div(shape.seq_q, config.block_m));
    if (config.policy == FmhaPolicyKind::tile_list) set_tile_list_source(launch.tile_list, mask, shape);
  }
  int64_t total = 1;
  for (int d = 0; d < kMaxDims; ++d) total *= int64_t{p.dilation[d]} * p.q_tiles[d];
  check_limit(total, (int64_t{1} << 31) - 1, "query tiles (grid size)");
  p.total_q_tiles = static_cast<int32_t>(total);
  return launch;
}

void rebind_forward_launch(FmhaLaunch& launch, const AttentionForward& problem) {
  FmhaParams& p = launch.params;
  p.q.data = problem.q.data;
  p.k.data = problem.k.data;
  p.v.data = problem.v.data;
  p.o.data = problem.out.data;
  p.lse.data = problem.lse.data;
  if (p.rpb.data != nullptr) p.rpb.data = problem.mask.rpb.data;
  if (launch.tile_list.mask != nullptr) {
    const AttentionMask& mask = problem.mask;
    launch.tile_list.mask =
        static_cast<const uint8_t*>(mask.kind == MaskKind::block ? mask.block_mask.data : mask.element_mask.data);
  }
}

}  // namespace attnkit::cuda::fmha
