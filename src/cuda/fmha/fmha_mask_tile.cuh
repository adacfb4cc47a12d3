// One tile of a block or element mask's tile grid, for the preprocessing kernels that classify one tile per
// thread: tiles are numbered as their classes are stored, (mask slice, Q tile, KV tile), a slice being one
// (mask batch, mask head) of a [B|1, H|1, rows, cols] mask.
#pragma once
#include <cstdint>

namespace attnkit::cuda::fmha {

struct MaskTile {
  int32_t q_tile = 0;
  int32_t kv_tile = 0;
  int64_t slice_offset = 0;  // elements from the mask's start to its slice's first element
};

// `List` is TileListBuildParams or BackwardListBuildParams (q_tiles, kv_tiles, mask_heads, mask_stride).
template <class List>
__device__ __forceinline__ MaskTile mask_tile(const List& p, int64_t tile) {
  const int64_t per_slice = static_cast<int64_t>(p.q_tiles) * p.kv_tiles;
  const int64_t slice = tile / per_slice;
  MaskTile t;
  t.q_tile = static_cast<int32_t>(tile % per_slice / p.kv_tiles);
  t.kv_tile = static_cast<int32_t>(tile % p.kv_tiles);
  t.slice_offset = (slice / p.mask_heads) * p.mask_stride[0] + (slice % p.mask_heads) * p.mask_stride[1];
  return t;
}

// Whether an element mask tile's rows can be read as whole 16-byte vectors: `cols` (the tile's keys inside
// the sequence) fill the tile's `BlockN` columns, each row is contiguous, rows start 16 bytes apart and the
// tile's first byte `tile_start` is 16-byte aligned. `List` as for mask_tile.
template <int BlockN, class List>
__device__ __forceinline__ bool mask_rows_are_vectors(const List& p, const uint8_t* tile_start, int32_t cols) {
  static_assert(BlockN % 16 == 0, "whole 16-byte chunks per tile row");
  return cols == BlockN && p.mask_stride[3] == 1 && p.mask_stride[2] % 16 == 0 &&
         reinterpret_cast<uintptr_t>(tile_start) % 16 == 0;
}

}  // namespace attnkit::cuda::fmha
