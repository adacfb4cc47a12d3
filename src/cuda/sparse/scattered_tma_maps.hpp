// The TMA form of the scattered forward's K / V staging (scattered_forward_kernel.cuh, the producer-warp
// pipeline): tensor maps of K and V seen as (columns, KV head, token[, batch]), one box a tile: 64 columns x 1
// head x 256 keys, written 128-byte swizzled, which is the staged tile's own layout at width 64 (StagedTile<64>:
// chunk ^ row % 8 in 128-byte rows). Columns past D and keys past Sk read as zeros.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

inline constexpr int kTmaTileColumns = 64;
inline constexpr int kTmaTileKeys = 256;

struct ScatteredTmaForwardParams {  // CUtensorMap members impose their own (64-byte) alignment
  CUtensorMap k;
  CUtensorMap v;
  ScatteredForwardParams base;
  int32_t rank = 0;  // 3: (columns, head, token) for batch 1; 4: the batch as the last coordinate
};

// Fills out.k, out.v and out.rank for `p` (bf16 or fp16 elements, D and Dv at most 64) and `batch` batch
// elements; false when TMA cannot express the tiles (token grids of several dimensions, addresses or strides
// that are not multiples of 16 bytes, a driver without cuTensorMapEncodeTiled or refusing the map): the
// caller then stages with cp.async.
bool make_scattered_key_value_maps(const ScatteredForwardParams& p, int32_t batch, ScatteredTmaForwardParams& out);

}  // namespace attnkit::cuda::sparse
