// The TMA form of the scattered kernels' staging (the producer-warp pipeline of scattered_tma_pipeline.cuh): tensor
// maps of K and V (the forward and dQ kernels) or of Q and dO (the dK/dV kernel) seen as (columns, head, token[,
// batch]), one box a tile: 64 columns x 1 head x 256 tokens, written 128-byte swizzled, which is the staged tile's own
// layout at width 64 (StagedTile<64>: chunk ^ row % 8 in 128-byte rows); for the dK/dV kernel also the backward's
// lse2 and delta workspace rows seen as (query, head, batch) fp32, 256 queries a box. Columns past D and tokens past
// the sequence read as zeros.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

inline constexpr int kTmaTileColumns = 64;
inline constexpr int kTmaTileKeys = 256;

// A kernel's parameter block with the maps of its K and V (CUtensorMap members impose their own 64-byte alignment).
template <class Base>
struct ScatteredTmaParams {
  CUtensorMap k;
  CUtensorMap v;
  Base base;
  int32_t rank = 0;  // 3: (columns, head, token) for batch 1; 4: the batch as the last coordinate
};

using ScatteredTmaForwardParams = ScatteredTmaParams<ScatteredForwardParams>;
using ScatteredTmaGradQParams = ScatteredTmaParams<ScatteredBackwardParams>;

// Fills k_map, v_map and rank for K and V of `sizes` (bf16 or fp16 elements, D and Dv at most 64) and `batch` batch
// elements; false when TMA cannot express the tiles (token grids of several dimensions, addresses or strides that are
// not multiples of 16 bytes, a driver without cuTensorMapEncodeTiled or refusing the map): the caller then stages with
// cp.async.
bool make_scattered_key_value_maps(const ScatteredSizes& sizes, const SequenceTensor& k, const SequenceTensor& v,
                                   int32_t batch, CUtensorMap& k_map, CUtensorMap& v_map, int32_t& rank);

// The dK/dV kernel's block: Q, dO and the lse2 / delta rows of a backward's parameters.
struct ScatteredTmaKeyParams {
  CUtensorMap q;
  CUtensorMap grad_out;
  CUtensorMap lse_log2;
  CUtensorMap delta;
  ScatteredBackwardParams base;
  int32_t rank = 0;  // of q and grad_out (the float rows' maps have rank 3)
};

// Fills `out` for `p` (its workspace rows p.lse_log2 and p.delta of p.row_pitch floats per (batch, query head)) and
// p.batch batch elements; false where TMA cannot express the tiles, as above.
bool make_scattered_query_maps(const ScatteredBackwardParams& p, ScatteredTmaKeyParams& out);

// The same for a parameter block: out.base = p and its K and V maps.
template <class Base>
bool make_scattered_key_value_maps(const Base& p, int32_t batch, ScatteredTmaParams<Base>& out) {
  out.base = p;
  return make_scattered_key_value_maps(p, p.k, p.v, batch, out.k, out.v, out.rank);
}

}  // namespace attnkit::cuda::sparse
