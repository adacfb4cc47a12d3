// TMA tensor maps of the Hopper kernels: the forward's Q, K and V tiles, the backward's dQ accumulator tiles.
//
// A KV tile is a box of tokens (fmha_params.hpp, box mode): BlockN rows, the last token dimension
// fastest. Seen as a tensor of (head dim, KV head, token dims innermost first, batch), such a tile is
// one TMA box per 64-column chunk: (64, 1, box extents..., 1), written 128-byte swizzled exactly where
// the kernel's shared layouts expect it (kernels compiled for D 32: one 32-column box, 64-byte swizzled). TMA takes at
// most 5 dimensions: 3-D token grids fold the batch into the outermost token dimension when its stride allows (batch
// stride = extent x stride), and coordinates past an extent read zeros — columns past D / Dv and keys past the grid
// edge. A dilated token dimension is traversed with the dilation as the map's element stride: a box starting at the
// tile's first token loads every dilation-th token of its dilation group (at most 8 apart, a box spanning at most 256
// tokens). make_sm90_tile_maps() says when this applies (box mode, dilation TMA can step, strides that TMA can
// express); otherwise the kernel gathers rows with cp.async. A Q tile (BlockM tokens of the query grid) is mapped the
// same way, with its own flags, when the K/V maps apply (the producer's TMA path) and TMA can express the Q tile too.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha_sm90 {

struct Sm90TileMaps {  // CUtensorMap members impose their own alignment
  CUtensorMap k;
  CUtensorMap v;
  CUtensorMap q;
  int32_t enabled = 0;     // 0: gather K and V with cp.async
  int32_t rank = 0;        // K/V tensor-map dimensions (3..5)
  int32_t fold_batch = 0;  // batch folded into the outermost token coordinate
  int32_t has_batch = 0;   // the last coordinate is the batch
  int32_t q_enabled = 0;   // 0: gather Q with cp.async
  int32_t q_rank = 0;      // the same three for the Q map
  int32_t q_fold_batch = 0;
  int32_t q_has_batch = 0;
};

// Fills `maps` for Q tiles of `block_m` queries and K/V tiles of `block_n` keys, loaded as boxes of
// `box_columns` 16-bit columns (the kernel's swizzled row chunk: 64, or 32 for a kernel compiled for D 32);
// leaves maps.enabled = 0 (K/V) or maps.q_enabled = 0 (Q) when TMA cannot express those tiles. Throws
// Status::cuda_error when the driver refuses a map it should accept.
void make_sm90_tile_maps(const fmha::FmhaParams& p, DType dtype, int box_columns, int block_m, int block_n,
                         Sm90TileMaps& maps);

// The backward's fast-mode dQ accumulator (fp32 [B, Sq, Hq, D], fmha_backward_params.hpp) seen the same
// way: (D, query head, token dims innermost first, batch), one box per 32-column slice (128 bytes,
// swizzled) of a Q tile of BlockM tokens, so that a warpgroup adds a visit's partial dQ with one TMA
// reduction per slice (cp.reduce.async.bulk.tensor .add); rows past the extents and columns past D
// are out of bounds and left alone. enabled = 0 when TMA cannot express the tiles (dilation, flat
// decomposed tokens, D < 32, D not a multiple of 4) or in deterministic mode.
inline constexpr int kDqBoxColumns = 32;
struct Sm90DqMap {
  CUtensorMap map;
  int32_t enabled = 0;
  int32_t rank = 0;
  int32_t fold_batch = 0;
  int32_t has_batch = 0;
};

void make_sm90_dq_map(const fmha::FmhaBackwardParams& p, int block_m, Sm90DqMap& map);

}  // namespace attnkit::cuda::fmha_sm90
