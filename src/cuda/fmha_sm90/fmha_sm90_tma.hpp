// TMA tensor maps for the Hopper forward kernel's K and V tiles.
//
// A KV tile is a box of tokens (fmha_params.hpp, box mode): BlockN rows, the last token dimension
// fastest. Seen as a tensor of (head dim, KV head, token dims innermost first, batch), such a tile is
// one TMA box per 64-column chunk: (64, 1, box extents..., 1), written 128-byte swizzled exactly where
// the kernel's shared layouts expect it. TMA takes at most 5 dimensions: 3-D token grids fold the
// batch into the outermost token dimension when its stride allows (batch stride = extent x stride),
// and coordinates past an extent read zeros — columns past D / Dv and keys past the grid edge.
// make_sm90_kv_maps() says when this applies (box mode, no dilation, strides that TMA can express);
// otherwise the kernel gathers rows with cp.async as before.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha_sm90 {

struct Sm90KvMaps {  // CUtensorMap members impose their own alignment
  CUtensorMap k;
  CUtensorMap v;
  int32_t enabled = 0;     // 0: gather K and V with cp.async
  int32_t rank = 0;        // tensor-map dimensions (3..5)
  int32_t fold_batch = 0;  // batch folded into the outermost token coordinate
  int32_t has_batch = 0;   // the last coordinate is the batch
};

// Fills `maps` for tiles of `block_n` keys of a kernel compiled for `head_dim_compiled` columns; leaves
// maps.enabled = 0 when TMA cannot express the tiles. Throws Status::cuda_error when the driver refuses
// a map it should accept.
void make_sm90_kv_maps(const fmha::FmhaParams& p, DType dtype, int head_dim_compiled, int block_n, Sm90KvMaps& maps);

}  // namespace attnkit::cuda::fmha_sm90
