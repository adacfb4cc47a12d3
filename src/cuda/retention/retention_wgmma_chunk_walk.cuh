// What one CTA of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh) walks: its (batch, head,
// value slice, segment), decay, scale and chunk range, from ChunkParams and the CTA index, in the order of the
// mma.sync chunk kernel (retention_chunk_kernel.cuh): the slices of one head and segment are neighbours.
#pragma once
#include <cstdint>

#include "cuda/common/opaque.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/retention/retention_decay.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

struct WgmmaChunkWalk {
  int64_t b = 0;
  int h = 0;
  int slice = 0;
  int segment = 0;            // in the state-only launch: the part (ChunkParams::state_splits)
  int64_t segment_begin = 0;  // the segment's (part's) first token
  int64_t tokens = 0;         // one past its last token (the sequence's end in the last segment)
  int64_t chunks = 0;
  float log2_gamma = 0.0f;
  float scale = 1.0f;
  bool state_only = false;
  bool idle = false;  // the state-only launch's last segment: its own state is never needed

  __device__ __forceinline__ int64_t chunk_begin(int64_t chunk) const { return segment_begin + chunk * 64; }
  // Real tokens of a chunk, 1..64.
  __device__ __forceinline__ int chunk_length(int64_t chunk) const {
    const int64_t left = tokens - chunk_begin(chunk);
    return static_cast<int>(left < 64 ? left : 64);
  }
};

// Tokens [begin, end) of the state-only launch's part `part` (ChunkParams::state_splits parts a segment, parts
// numbered across segments): empty where a segment's last parts fall past its end.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
};
__device__ __forceinline__ TokenRange state_part_tokens(const ChunkParams& p, int64_t part) {
  const int64_t segment = part / p.state_splits;
  const int64_t segment_end = (segment + 1) * p.segment_tokens < p.tokens ? (segment + 1) * p.segment_tokens : p.tokens;
  int64_t begin = segment * p.segment_tokens + (part % p.state_splits) * p.state_segment_tokens;
  begin = begin < segment_end ? begin : segment_end;
  const int64_t end = begin + p.state_segment_tokens < segment_end ? begin + p.state_segment_tokens : segment_end;
  return {begin, end};
}

// CTA `cta` of the job: (batch, head) slowest, then its segment (in the state-only launch its part, state_splits a
// segment), then its value slice.
__device__ __forceinline__ WgmmaChunkWalk wgmma_chunk_walk(const ChunkParams& p, int64_t cta) {
  WgmmaChunkWalk w;
  w.state_only = p.state_only != 0;
  const int64_t per_head = w.state_only ? static_cast<int64_t>(p.segments) * p.state_splits : p.segments;
  w.slice = static_cast<int>(cta % p.dv_slices);
  const int64_t segment_index = cta / p.dv_slices;
  w.segment = static_cast<int>(segment_index % per_head);
  const int64_t head_index = segment_index / per_head;
  w.h = static_cast<int>(head_index % p.heads);
  w.b = head_index / p.heads;
  w.log2_gamma = head_log2_gamma(p, w.h);
  w.scale = p.scale;
  if (w.state_only) {
    w.idle = w.segment / p.state_splits == p.segments - 1;  // the last segment's parts: never needed
    const TokenRange range = state_part_tokens(p, w.segment);
    w.segment_begin = range.begin;
    w.tokens = range.end;
  } else {
    w.segment_begin = w.segment * p.segment_tokens;
    const int64_t segment_end = w.segment_begin + p.segment_tokens;
    w.tokens = p.tokens < segment_end ? p.tokens : segment_end;
  }
  w.chunks = w.tokens > w.segment_begin ? (w.tokens - w.segment_begin + 63) / 64 : 0;
  return w;
}

// Byte offset of 16-bit element (row, col), col < 64, in a tile of 128-byte rows with the 128-byte swizzle (the GMMA
// SW128 atoms, retention_wgmma_chunk_traits.cuh): row r at 128 r, its 16-byte piece col / 8 at position
// (col / 8) ^ (r % 8). The tile must be 1024-byte aligned.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) {
  return static_cast<uint32_t>(row * 128 + ((((col >> 3) ^ row) & 7) << 4) + (col & 7) * 2);
}

// The 16-bit rows of an m64nN wgmma accumulator tile into a tile of 128-byte swizzled rows (N / 64 blocks of 64
// columns, `block_bytes` apart; `tile`: the shared address of its row 0) with stmatrix. `acc` holds the warpgroup
// thread's value pairs from `first_pair` on: pair p is row 16 warp + lane / 4 + 8 (p % 2), columns 8 (p / 2) +
// 2 (lane % 4) and one more. One instruction stores four 8 x 8 matrices, pairs 2q .. 2q + 3 (rows lo / hi of the
// warp's 16, column groups q and q + 1); lane l gives the address of row l % 8 of matrix l / 8, its 16-byte piece at
// (group % 8) ^ (row % 8) (swizzled_offset).
template <class Element, int Columns, class Acc>
__device__ __forceinline__ void store_accumulator_rows(const Acc& acc, int first_pair, uint32_t tile,
                                                       uint32_t block_bytes, int wg_tid) {
  const int lane = wg_tid % 32;
  const int matrix = lane / 8;
  const uint32_t lane_base =
      opaque(tile + static_cast<uint32_t>((16 * (wg_tid / 32) + lane % 8 + 8 * (matrix & 1)) * 128));
  const uint32_t row_class = static_cast<uint32_t>(lane % 8);
#pragma unroll
  for (int q = 0; q < Columns / 8; q += 2) {
    const int group = q + (matrix >> 1);
    const uint32_t address = lane_base + static_cast<uint32_t>(group >> 3) * block_bytes +
                             (((static_cast<uint32_t>(group) & 7u) ^ row_class) << 4);
    const int p = first_pair + 2 * q;
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address),
                 "r"(fmha::pack_pair<Element>(acc(2 * p), acc(2 * p + 1))),
                 "r"(fmha::pack_pair<Element>(acc(2 * p + 2), acc(2 * p + 3))),
                 "r"(fmha::pack_pair<Element>(acc(2 * p + 4), acc(2 * p + 5))),
                 "r"(fmha::pack_pair<Element>(acc(2 * p + 6), acc(2 * p + 7)))
                 : "memory");
  }
}

}  // namespace attnkit::cuda::retention
