// Preprocessing for TileListPolicy: turns a block mask or an element mask into per-Q-tile lists of
// the KV tiles to visit, with a full/partial flag, and packed predicate bits for partial tiles.
//
// classify_tiles_kernel: one CTA per (KV tile, Q tile, mask batch x mask head), with the main kernel's
// thread count and MMA partition, so each thread computes exactly the score elements it will own in
// the main kernel. Block masks are classified from the block entries that cover the tile (user block
// sizes need not match the tiles); when every block boundary is a tile boundary no tile needs element
// bits, and only the tile that crosses the end of the sequence is partial. Element masks are staged
// tile by tile into shared memory: 16-byte loads and stores when the tile's rows are whole, contiguous and
// 16-byte aligned (the common case: a contiguous mask whose key extent is a multiple of 16), else
// coalesced byte loads; the staged rows are padded by 16 bytes so that the threads of one MMA column,
// whose rows are 8 apart, read different banks. Class: 0 empty, 1 full, 2 partial with
// only the sequence end masked, 3 partial with element bits (written as kBitWords words per thread,
// word-major so that the main kernel's loads are coalesced).
// classify_aligned_block_tiles_kernel: the same classes for block masks whose block boundaries are all tile
// boundaries (each tile lies inside one block, so no tile needs bits), one thread per tile: a CTA per tile
// would be mostly launch cost there, multiplied by every mask slice of a per-head or per-batch mask.
// compact_tile_lists_kernel: one warp per (mask batch x mask head, Q tile) compacts the non-empty
// classes into the entry list (ballot + popc), in KV-tile order, and writes the count.
//
// Workspace (one stream-ordered cudaMallocAsync, freed with cudaFreeAsync on the same stream after the
// main kernel, so the whole call is graph-capturable): classes (1 byte per tile), entries (4 bytes per
// tile), counts (4 bytes per Q tile) and, for element masks or block masks whose blocks do not align
// with the tiles, kBitWords * kThreads * 4 bytes (1 KiB for 128x64 tiles) per tile:
// mask_bh * q_tiles * kv_tiles tiles in all.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_mask_tile.cuh"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha {

constexpr uint8_t kTileEmpty = 0;
constexpr uint8_t kTileFull = 1;
constexpr uint8_t kTilePartialSequenceEnd = 2;
constexpr uint8_t kTilePartialBits = 3;

constexpr int kAlignedClassifyThreads = 256;

// `tiles` = slices * q_tiles * kv_tiles, numbered as the classes are stored: (slice, Q tile, KV tile).
template <int BlockM, int BlockN>
__global__ void __launch_bounds__(kAlignedClassifyThreads)
    classify_aligned_block_tiles_kernel(const TileListBuildParams p, const int64_t tiles) {
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kAlignedClassifyThreads + threadIdx.x;
  if (tile >= tiles) return;
  const MaskTile t = mask_tile(p, tile);
  const bool attended = p.mask[t.slice_offset + (int64_t{t.q_tile} * BlockM / p.block_q) * p.mask_stride[2] +
                               (int64_t{t.kv_tile} * BlockN / p.block_k) * p.mask_stride[3]] != 0;
  const bool keys_complete = int64_t{t.kv_tile + 1} * BlockN <= p.seq_k;
  p.classes[tile] = !attended ? kTileEmpty : (keys_complete ? kTileFull : kTilePartialSequenceEnd);
}

// Stages the element mask's bytes of rows [m0, m0 + rows_valid) x columns [n0, n0 + cols_valid) at
// staged[r * Stride + c] (0 elsewhere in the tile).
template <int BlockM, int BlockN, int Stride, int Threads>
__device__ __forceinline__ void stage_element_mask_tile(const TileListBuildParams& p, int64_t mask_base, int32_t m0,
                                                        int32_t n0, int32_t rows_valid, int32_t cols_valid,
                                                        uint8_t* staged, int tid) {
  const uint8_t* rows = p.mask + mask_base + int64_t{m0} * p.mask_stride[2];
  if (mask_rows_are_vectors<BlockN>(p, rows + n0, cols_valid)) {
    constexpr int kChunks = BlockN / 16;
    for (int e = tid; e < BlockM * kChunks; e += Threads) {
      const int r = e / kChunks;
      const int c = (e % kChunks) * 16;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows_valid) v = *reinterpret_cast<const uint4*>(rows + int64_t{r} * p.mask_stride[2] + n0 + c);
      *reinterpret_cast<uint4*>(staged + r * Stride + c) = v;
    }
    return;
  }
  for (int e = tid; e < BlockM * BlockN; e += Threads) {
    const int r = e / BlockN;
    const int c = e % BlockN;
    uint8_t v = 0;
    if (r < rows_valid && c < cols_valid) v = rows[int64_t{r} * p.mask_stride[2] + (n0 + c) * p.mask_stride[3]];
    staged[r * Stride + c] = v;
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads) classify_tiles_kernel(const TileListBuildParams p) {
  using namespace cute;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  static_assert(kBlockN % 16 == 0, "whole 16-byte chunks per staged row");
  constexpr int kStride = kBlockN + 16;  // bytes per staged row (see the file comment)
  __shared__ alignas(16) uint8_t staged[kBlockM * kStride];
  const int tid = static_cast<int>(threadIdx.x);
  const int32_t kv_tile = static_cast<int32_t>(blockIdx.x);
  const int32_t q_tile = static_cast<int32_t>(blockIdx.y);
  const int32_t mask_bh = static_cast<int32_t>(blockIdx.z);
  const int64_t mask_base = (mask_bh / p.mask_heads) * p.mask_stride[0] + (mask_bh % p.mask_heads) * p.mask_stride[1];
  const int32_t m0 = q_tile * kBlockM;
  const int32_t n0 = kv_tile * kBlockN;
  const int32_t rows_valid = min(kBlockM, p.seq_q - m0);
  const int32_t cols_valid = min(kBlockN, p.seq_k - n0);

  typename Traits::TiledMma mma;
  Tensor coords =
      as_rows_cols(mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})));

  uint8_t tile_class = kTileEmpty;
  if (p.kind == TileMaskKind::block) {
    const int64_t qb0 = m0 / p.block_q;
    const int64_t kb0 = n0 / p.block_k;
    const int64_t nq = (m0 + rows_valid - 1) / p.block_q - qb0 + 1;
    const int64_t nk = (n0 + cols_valid - 1) / p.block_k - kb0 + 1;
    int any = 0;
    int all = 1;
    for (int64_t e = tid; e < nq * nk; e += Traits::kThreads) {
      const bool v = p.mask[mask_base + (qb0 + e / nk) * p.mask_stride[2] + (kb0 + e % nk) * p.mask_stride[3]] != 0;
      any |= v;
      all &= v;
    }
    any = __syncthreads_or(any);
    all = __syncthreads_and(all);
    if (!any) {
      tile_class = kTileEmpty;
    } else if (all) {
      tile_class = cols_valid == kBlockN ? kTileFull : kTilePartialSequenceEnd;
    } else {
      tile_class = p.blocks_align_with_tiles ? kTilePartialSequenceEnd : kTilePartialBits;
    }
    if (tile_class == kTilePartialBits) {
      for (int e = tid; e < kBlockM * kBlockN; e += Traits::kThreads) {
        const int r = e / kBlockN;
        const int c = e % kBlockN;
        bool v = false;
        if (r < rows_valid && c < cols_valid) {
          v = p.mask[mask_base + ((m0 + r) / p.block_q) * p.mask_stride[2] +
                     ((n0 + c) / p.block_k) * p.mask_stride[3]] != 0;
        }
        staged[r * kStride + c] = v;
      }
      __syncthreads();
    }
  } else {
    stage_element_mask_tile<kBlockM, kBlockN, kStride, Traits::kThreads>(p, mask_base, m0, n0, rows_valid, cols_valid,
                                                                         staged, tid);
    __syncthreads();
    int any = 0;
    int all = 1;
#pragma unroll
    for (int i = 0; i < Traits::kRows; ++i) {
      const int r = get<0>(coords(i, 0));
      if (r >= rows_valid) continue;
#pragma unroll
      for (int j = 0; j < Traits::kCols; ++j) {
        const bool v = staged[r * kStride + get<1>(coords(0, j))] != 0;
        any |= v;
        all &= v;
      }
    }
    any = __syncthreads_or(any);
    all = __syncthreads_and(all);
    tile_class = !any ? kTileEmpty : (all ? kTileFull : kTilePartialBits);
  }

  const int64_t slot = (static_cast<int64_t>(mask_bh) * p.q_tiles + q_tile) * p.kv_tiles + kv_tile;
  if (tid == 0) p.classes[slot] = tile_class;
  if (tile_class != kTilePartialBits) return;
  uint32_t words[Traits::kBitWords];
#pragma unroll
  for (int w = 0; w < Traits::kBitWords; ++w) words[w] = 0;
#pragma unroll
  for (int i = 0; i < Traits::kRows; ++i) {
    const int r = get<0>(coords(i, 0));
#pragma unroll
    for (int j = 0; j < Traits::kCols; ++j) {
      const int bit = i * Traits::kCols + j;
      const bool v = staged[r * kStride + get<1>(coords(0, j))] != 0;
      words[bit / 32] |= static_cast<uint32_t>(v) << (bit % 32);
    }
  }
  uint32_t* out = p.bits + slot * Traits::kBitWords * Traits::kThreads + tid;
#pragma unroll
  for (int w = 0; w < Traits::kBitWords; ++w) out[w * Traits::kThreads] = words[w];
}

template <class Traits>
__global__ void __launch_bounds__(32) compact_tile_lists_kernel(const TileListBuildParams p) {
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t row = static_cast<int64_t>(blockIdx.y) * p.q_tiles + blockIdx.x;
  const uint8_t* classes = p.classes + row * p.kv_tiles;
  uint32_t* entries = p.entries + row * p.kv_tiles;
  int32_t count = 0;
  for (int32_t base = 0; base < p.kv_tiles; base += 32) {
    const int32_t kv_tile = base + lane;
    const uint8_t c = kv_tile < p.kv_tiles ? classes[kv_tile] : kTileEmpty;
    const uint32_t ballot = __ballot_sync(0xffffffffu, c != kTileEmpty);
    if (c != kTileEmpty) {
      uint32_t entry = static_cast<uint32_t>(kv_tile);
      if (c == kTilePartialSequenceEnd) entry |= kEntryPartial;
      if (c == kTilePartialBits) entry |= kEntryPartial | kEntryHasBits;
      entries[count + __popc(ballot & ((1u << lane) - 1u))] = entry;
    }
    count += __popc(ballot);
  }
  if (lane == 0) p.counts[row] = count;
}

}  // namespace attnkit::cuda::fmha
