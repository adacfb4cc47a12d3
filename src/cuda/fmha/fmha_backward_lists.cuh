// Tile lists of block and element masks for the backward: every (mask batch x head, Q tile, KV tile) is
// classified empty, full or partial once, then compacted twice — along rows (per Q tile, the KV tiles
// the dQ kernel visits, in KV order) and along columns (per KV tile, the Q tiles the dK/dV kernel
// visits, in Q order; the transpose of the forward's lists).
//
// classify_backward_tiles_kernel: one CTA per tile. Block masks read the block entries covering the
// tile (block sizes need not match the tiles), element masks every element of the tile, with 16-byte
// loads when the tile's rows are whole, contiguous and 16-byte aligned, else coalesced byte loads. A tile is full when
// every element inside the sequences is attended and the tile's keys do not run past the end of the keys (rows past the
// end of the queries carry no weight in the backward); the main kernels mask partial tiles of block masks from the mask
// itself and those of element masks from the key-major bits below. classify_large_block_tiles_kernel: the same classes
// for block masks whose blocks are at least a tile in each dimension (a tile meets at most 2 x 2 blocks), one thread
// per tile: a CTA per tile would be mostly launch cost there, multiplied by every mask slice of a per-head or per-batch
// mask. compact_backward_rows_kernel / compact_backward_columns_kernel: one warp per list, ballot + popc, entries tile
// | kEntryPartial, then the count. rank_backward_rows_kernel (ordered dQ only, fmha_backward_dq_order.hpp): each row's
// KV tiles get their rank in descending order, written where the tile's class is indexed. Element masks are also packed
// key-major into 32-bit words (launch_mask_bits_by_key, cuda/common/mask_bits_by_key.cu): the main kernels then test a
// partial tile's pairs with a few word loads per row instead of one byte load per pair.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_mask_tile.cuh"

namespace attnkit::cuda::fmha {

constexpr uint8_t kBackwardTileEmpty = 0;
constexpr uint8_t kBackwardTileFull = 1;
constexpr uint8_t kBackwardTilePartial = 2;

// Whether one of the four bytes of `word` is zero.
__device__ __forceinline__ bool has_zero_byte(uint32_t word) {
  return ((word - 0x01010101u) & ~word & 0x80808080u) != 0u;
}

template <int BlockM, int BlockN>
__global__ void __launch_bounds__(128) classify_backward_tiles_kernel(const BackwardListBuildParams p) {
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t kv_tile = static_cast<int32_t>(blockIdx.x);
  const int32_t q_tile = static_cast<int32_t>(blockIdx.y);
  const int32_t mask_bh = static_cast<int32_t>(blockIdx.z);
  const int64_t base = (mask_bh / p.mask_heads) * p.mask_stride[0] + (mask_bh % p.mask_heads) * p.mask_stride[1];
  const int32_t m0 = q_tile * BlockM;
  const int32_t n0 = kv_tile * BlockN;
  const int32_t rows = min(BlockM, p.seq_q - m0);
  const int32_t cols = min(BlockN, p.seq_k - n0);
  int any = 0;
  int all = 1;
  if (p.kind == TileMaskKind::block) {
    const int64_t qb0 = m0 / p.block_q;
    const int64_t kb0 = n0 / p.block_k;
    const int64_t nq = (m0 + rows - 1) / p.block_q - qb0 + 1;
    const int64_t nk = (n0 + cols - 1) / p.block_k - kb0 + 1;
    for (int64_t e = tid; e < nq * nk; e += 128) {
      const bool v = p.mask[base + (qb0 + e / nk) * p.mask_stride[2] + (kb0 + e % nk) * p.mask_stride[3]] != 0;
      any |= v;
      all &= v;
    }
  } else {
    const uint8_t* tile_rows = p.mask + base + int64_t{m0} * p.mask_stride[2] + n0 * p.mask_stride[3];
    if (mask_rows_are_vectors<BlockN>(p, tile_rows, cols)) {
      constexpr int kChunks = BlockN / 16;
      for (int e = tid; e < rows * kChunks; e += 128) {
        const uint4 v =
            *reinterpret_cast<const uint4*>(tile_rows + int64_t{e / kChunks} * p.mask_stride[2] + (e % kChunks) * 16);
        for (const uint32_t word : {v.x, v.y, v.z, v.w}) {
          any |= word != 0u;
          all &= !has_zero_byte(word);
        }
      }
    } else {
      for (int e = tid; e < rows * cols; e += 128) {
        const int r = e / cols;
        const int c = e % cols;
        const bool v = tile_rows[int64_t{r} * p.mask_stride[2] + int64_t{c} * p.mask_stride[3]] != 0;
        any |= v;
        all &= v;
      }
    }
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  if (tid == 0) {
    uint8_t c = kBackwardTileEmpty;
    if (any) c = all && cols == BlockN ? kBackwardTileFull : kBackwardTilePartial;
    p.classes[(static_cast<int64_t>(mask_bh) * p.q_tiles + q_tile) * p.kv_tiles + kv_tile] = c;
  }
}

constexpr int kLargeBlockClassifyThreads = 256;

// `tiles` = slices * q_tiles * kv_tiles, numbered as the classes are stored: (slice, Q tile, KV tile).
template <int BlockM, int BlockN>
__global__ void __launch_bounds__(kLargeBlockClassifyThreads)
    classify_large_block_tiles_kernel(const BackwardListBuildParams p, const int64_t tiles) {
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kLargeBlockClassifyThreads + threadIdx.x;
  if (tile >= tiles) return;
  const MaskTile t = mask_tile(p, tile);
  const int64_t base = t.slice_offset;
  const int32_t m0 = t.q_tile * BlockM;
  const int32_t n0 = t.kv_tile * BlockN;
  const int32_t rows = min(BlockM, p.seq_q - m0);
  const int32_t cols = min(BlockN, p.seq_k - n0);
  bool any = false;
  bool all = true;
  for (int64_t qb = m0 / p.block_q; qb <= (m0 + rows - 1) / p.block_q; ++qb) {
    for (int64_t kb = n0 / p.block_k; kb <= (n0 + cols - 1) / p.block_k; ++kb) {
      const bool v = p.mask[base + qb * p.mask_stride[2] + kb * p.mask_stride[3]] != 0;
      any |= v;
      all &= v;
    }
  }
  uint8_t c = kBackwardTileEmpty;
  if (any) c = all && cols == BlockN ? kBackwardTileFull : kBackwardTilePartial;
  p.classes[tile] = c;
}

// Compacts `n` classes read at classes[i * stride] into entries / *count.
__device__ __forceinline__ void compact_classes(const uint8_t* classes, int64_t stride, int32_t n, uint32_t* entries,
                                                int32_t* count_out) {
  const int lane = static_cast<int>(threadIdx.x);
  int32_t count = 0;
  for (int32_t start = 0; start < n; start += 32) {
    const int32_t i = start + lane;
    const uint8_t c = i < n ? classes[i * stride] : kBackwardTileEmpty;
    const uint32_t ballot = __ballot_sync(0xffffffffu, c != kBackwardTileEmpty);
    if (c != kBackwardTileEmpty) {
      entries[count + __popc(ballot & ((1u << lane) - 1u))] =
          static_cast<uint32_t>(i) | (c == kBackwardTilePartial ? kEntryPartial : 0u);
    }
    count += __popc(ballot);
  }
  if (lane == 0) *count_out = count;
}

// Templates (on the tile shape) so that every instantiation file may hold its own copy.
template <int BlockM, int BlockN>
__global__ void __launch_bounds__(32) compact_backward_rows_kernel(const BackwardListBuildParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.y) * p.q_tiles + blockIdx.x;  // (mask_bh, q_tile)
  compact_classes(p.classes + row * p.kv_tiles, 1, p.kv_tiles, p.q_entries + row * p.kv_tiles, p.q_counts + row);
}

// After compact_backward_rows_kernel: entry k of a row of `count` entries is the KV tile of rank count - 1 - k.
template <int BlockM, int BlockN>
__global__ void __launch_bounds__(32) rank_backward_rows_kernel(const BackwardListBuildParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.y) * p.q_tiles + blockIdx.x;  // (mask_bh, q_tile)
  const uint32_t* entries = p.q_entries + row * p.kv_tiles;
  const int32_t count = p.q_counts[row];
  for (int32_t k = static_cast<int32_t>(threadIdx.x); k < count; k += 32) {
    p.turn_table[row * p.kv_tiles + (entries[k] & kEntryTileMask)] = static_cast<uint32_t>(count - 1 - k);
  }
}

template <int BlockM, int BlockN>
__global__ void __launch_bounds__(32) compact_backward_columns_kernel(const BackwardListBuildParams p) {
  const int64_t mask_bh = blockIdx.y;
  const int64_t column = mask_bh * p.kv_tiles + blockIdx.x;  // (mask_bh, kv_tile)
  compact_classes(p.classes + mask_bh * p.q_tiles * p.kv_tiles + blockIdx.x, p.kv_tiles, p.q_tiles,
                  p.kv_entries + column * p.q_tiles, p.kv_counts + column);
}

}  // namespace attnkit::cuda::fmha
