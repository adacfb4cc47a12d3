// The TMA form of the scattered kernels' K / V staging (the producer-warp pipeline of scattered_tma_pipeline.cuh,
// run by the forward and the dQ kernel): tensor maps of K and V seen as (columns, KV head, token[, batch]), one box a
// tile: 64 columns x 1 head x 256 keys, written 128-byte swizzled, which is the staged tile's own layout at width 64
// (StagedTile<64>: chunk ^ row % 8 in 128-byte rows). Columns past D and keys past Sk read as zeros.
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

// The same for a parameter block: out.base = p and its K and V maps.
template <class Base>
bool make_scattered_key_value_maps(const Base& p, int32_t batch, ScatteredTmaParams<Base>& out) {
  out.base = p;
  return make_scattered_key_value_maps(p, p.k, p.v, batch, out.k, out.v, out.rank);
}

}  // namespace attnkit::cuda::sparse
