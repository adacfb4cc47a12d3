// Chooses the box shapes of Q tiles (BlockM tokens) and KV tiles (BlockN tokens) for a neighborhood
// mask: powers of two per dimension whose product is the tile size.
//
// Cost model: the MMA work is proportional to the number of (Q tile, visited KV tile) pairs, and a
// partial tile costs a little more than a full one (element masking). Q tiles enumerate as a product
// over dimensions (dilation group, tile position) and the KV tiles a Q tile visits form a product of
// per-dimension ranges, so the total visits are prod_d C_d and the full ones prod_d F_d, with C_d and
// F_d per-dimension sums over that dimension's Q tiles (dim_key_tiles, with the kernel's tile origins). These are
// tabulated per dimension for every box extent, then all splits of log2(BlockM) and log2(BlockN) over the dimensions
// are scored; ties go to the more cubic shape. Results are cached per geometry.
#pragma once
#include <array>
#include <cstdint>

#include "attnkit/attention.hpp"
#include "cuda/common/tile_range.hpp"

namespace attnkit::cuda::fmha {

struct BoxShapes {
  std::array<int, 3> q_log2{0, 0, 0};
  std::array<int, 3> kv_log2{0, 0, 0};
};

struct BoxGeometry {
  int dims = 1;
  std::array<int64_t, 3> extent{1, 1, 1};
  std::array<int64_t, 3> dilation{1, 1, 1};
  std::array<WindowRule, 3> rule{};
};

// The geometry of a neighborhood mask over `dims` token dimensions of the given extents (one window
// rule per dimension: kernel size, stride, causality; and its dilation).
BoxGeometry neighborhood_geometry(int dims, const std::array<NeighborhoodDim, kMaxTokenDims>& neighborhood,
                                  const std::array<int64_t, kMaxTokenDims>& extents);

// kv_halves: the KV tile is consumed as two halves that skip the Q tiles they do not meet (the Hopper
// backward's two MMA warpgroups): shapes are scored by the half tiles' visits, halves taken along the
// KV box's outermost dimension of more than one key.
// origins: where the visited KV tiles start (dim_key_tiles): KvTileOrigin::window for the forward
// kernels (BoxPolicy).
BoxShapes choose_box_shapes(const BoxGeometry& geometry, int block_m_log2, int block_n_log2, bool kv_halves,
                            KvTileOrigin origins);

// The backward's shapes, scored by the dK/dV kernels' walk: one CTA per KV tile (aligned boxes), visiting
// the Q tiles that meet it, which start at q_origins (dim_query_tiles: KvTileOrigin::window unless the
// Hopper tier orders its dQ additions, fmha_backward_arguments.cpp). kv_halves as above, each half counting
// the visits that meet its keys. With aligned Q tiles the visits are the forward's aligned ones: the same
// shapes as choose_box_shapes(..., aligned).
BoxShapes choose_backward_box_shapes(const BoxGeometry& geometry, int block_m_log2, int block_n_log2, bool kv_halves,
                                     KvTileOrigin q_origins);

// Visits of (Q tile, KV tile) pairs and how many of them are full, for given shapes (tests, tuning):
// the forward's walk (per Q tile, its KV tiles at `origins`) and the backward dK/dV kernels' (per KV
// tile, its Q tiles at q_origins; kv_halves: the visits of each half of the KV tile, summed, as the
// chooser scores them).
struct BoxVisitCounts {
  double visited = 0;
  double full = 0;
};
BoxVisitCounts count_box_visits(const BoxGeometry& geometry, const BoxShapes& shapes, KvTileOrigin origins);
BoxVisitCounts count_backward_box_visits(const BoxGeometry& geometry, const BoxShapes& shapes, KvTileOrigin q_origins,
                                         bool kv_halves = false);

}  // namespace attnkit::cuda::fmha
