// Tiles of the explicit decay matrix [H|1, Tq, Tk] in shared memory, for the parallel form's kernels over a
// matrix (retention_normalized_kernel.cuh, retention_parallel_query_backward_kernel.cuh,
// retention_parallel_key_backward_kernel.cuh). Each kernel stages the 64x64 tile (query rows i0.., keys j0..) of
// the block pair it is about to compute in the same cp.async group as that pair's K/V (or Q/dO) tiles, so the
// matrix read overlaps the previous pair's math instead of stalling the weights' use (the grouped backward kernels
// keep one stage only and stage the next tile during the block's last MMAs: begin_single_stage_decay_block).
//
// Staging: entries are kept as stored (float32 or the inputs' 16-bit type; converted where read, exactly as a
// global read converted them), 16-byte cp.async chunks when the matrix's rows start 16-byte aligned (a chunk
// that ends past Tk copies only its valid bytes and zero-fills the rest); otherwise element-wise loads and
// shared stores. Entries past Tq or Tk are zeros, so they weigh nothing.
//
// Reads: the forward and dQ read two adjacent entries of rows g and g + 8 of the warp's 16 rows (a float2, or a
// pair of 16-bit entries); with rows 72 entries apart, the lanes of a half-warp (float2) or a warp (pairs) hit
// distinct banks. dK and dV read the tile transposed, one entry per lane for 8 keys (g) of 4 query columns (2 q):
// a pitch of 68 float32 entries (2 * 68 = 8 banks mod 32) or 72 16-bit entries keeps those distinct too.
//
// Zero tiles: a warp's 16x64 strip of the tile (its 16 rows of the score tile) that is all zero contributes nothing
// (every score there is 0 and adds 0 to every sum), so the warp skips that block pair's MMAs; it decides with one
// vote after reading the strip in 16-byte chunks. A tile that is zero for every warp (the upper triangle of a
// causal matrix) is skipped by the whole CTA. The backward kernels also learn it at the pipeline's barrier (each
// thread checks what it staged, __syncthreads_or) and, since zero tiles come in runs, fetch the next block's other
// operands (K, V or Q, dO) only after a nonzero tile, loading them late, uniformly over the CTA, when a tile after
// a zero one is nonzero: a run of zero tiles costs only the matrix's read (begin_decay_block). The forward does the
// same in its grouped instances (several (batch, slice) pairs per CTA, which have the registers for it); its
// one-member instance fetches K and V always (the bookkeeping's registers would spill under its register cap).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/opaque.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

// What the kernels need of the matrix's entry type: float, or the inputs' 16-bit type (a uniform branch on
// DecayMatrixOperand::f32 picks the instance of each helper below).
template <class Entry>
struct DecayEntries {
  static constexpr int kBytes = static_cast<int>(sizeof(Entry));
  static constexpr bool kF32 = kBytes == 4;
  // Magnitude bits of the two 16-bit entries or the one float32 entry of a 32-bit word.
  static constexpr uint32_t kMagnitude = kF32 ? 0x7fffffffu : 0x7fff7fffu;
};

// Entries per shared row of a tile: kDecayTilePitch, or 68 for float32 tiles read down their columns.
template <class Entry, bool kColumnReads>
__device__ __forceinline__ constexpr int decay_tile_pitch() {
  return kColumnReads && DecayEntries<Entry>::kF32 ? 68 : kDecayTilePitch;
}

// Bytes of one pipeline stage of a tile (every pitch fits kDecayTilePitch).
template <class Entry>
__device__ __forceinline__ constexpr int decay_tile_stage_bytes() {
  return 64 * kDecayTilePitch * DecayEntries<Entry>::kBytes;
}

// Entries [64 row_block, +64) x [64 col_block, +64) of head h's matrix [Tq, Tk] into `tile` (kPitch entries per
// row), entries at or past row_limit (Tq) or col_limit (Tk) zero.
template <class Entry, int kPitch, int Threads>
__device__ __forceinline__ void stage_decay_tile(Entry* tile, const DecayMatrixOperand& d, int h, int row_block,
                                                 int col_block, int64_t row_limit, int64_t col_limit) {
  // Opaque to the compiler: what is computed from them here is recomputed per tile rather than hoisted out of the
  // kernels' main loops into registers held through their MMAs.
  asm volatile("" : "+r"(h), "+r"(row_block), "+r"(col_block));
  const int64_t i0 = static_cast<int64_t>(row_block) * 64;
  const int64_t j0 = static_cast<int64_t>(col_block) * 64;
  const char* rows = static_cast<const char*>(d.data) + h * d.head * DecayEntries<Entry>::kBytes;
  const Entry* base = reinterpret_cast<const Entry*>(rows);
  const int64_t row_stride = d.row;
  if (d.vector_rows) {
    // 16-byte chunks: 16 (fp32) or 8 (16-bit) per row; a pass of the CTA's threads covers 8 or 16 rows.
    constexpr int kChunkEntries = 16 / DecayEntries<Entry>::kBytes;
    constexpr int kChunksPerRow = 64 / kChunkEntries;
    constexpr int kRowsPerPass = Threads / kChunksPerRow;
    const int c = static_cast<int>(threadIdx.x) % kChunksPerRow * kChunkEntries;
    const int r0 = static_cast<int>(threadIdx.x) / kChunksPerRow;
    const int64_t valid_entries = col_limit - (j0 + c);
    const int copy_bytes = valid_entries >= kChunkEntries ? 16
                           : valid_entries > 0 ? static_cast<int>(valid_entries) * DecayEntries<Entry>::kBytes
                                               : 0;
    const Entry* source = base + (i0 + r0) * row_stride + j0 + c;
    const int64_t rows_left = row_limit - i0 - r0;
    uint32_t destination = shared_address(tile + r0 * kPitch + c);
#pragma unroll 1
    for (int r = 0; r < 64 - r0; r += kRowsPerPass) {
      const bool valid = r < rows_left && copy_bytes > 0;
      copy_16_bytes_async_prefix(destination, valid ? source : base, valid ? copy_bytes : 0);
      source += kRowsPerPass * row_stride;
      destination += kRowsPerPass * kPitch * DecayEntries<Entry>::kBytes;
    }
  } else {
    // Element-wise loads and shared stores (visible after the kernels' next barrier): thread t copies column
    // t % 64 of rows t / 64, t / 64 + 2, ...
    constexpr int kRowsPerPass = Threads / 64;
    const int c = static_cast<int>(threadIdx.x) % 64;
    const int r0 = static_cast<int>(threadIdx.x) / 64;
    const bool column_valid = j0 + c < col_limit;
    const Entry* source = base + (i0 + r0) * row_stride + j0 + c;
    const int64_t rows_left = row_limit - i0 - r0;
    Entry* destination = tile + r0 * kPitch + c;
#pragma unroll 1
    for (int r = 0; r < 64 - r0; r += kRowsPerPass) {
      *destination = column_valid && r < rows_left ? *source : Entry(0.0f);
      source += kRowsPerPass * row_stride;
      destination += kRowsPerPass * kPitch;
    }
  }
}

// Entries (row, col) and (row, col + 1) of a staged tile (col even), as float.
template <class Element, class Entry, int kPitch>
__device__ __forceinline__ float2 decay_tile_pair(const Entry* tile, int row, int col) {
  if constexpr (DecayEntries<Entry>::kF32) {
    return *reinterpret_cast<const float2*>(tile + row * kPitch + col);
  } else {
    return unpack_pair<Element>(*reinterpret_cast<const uint32_t*>(tile + row * kPitch + col));
  }
}

// Entry (row, col) of a staged tile, as float.
template <class Entry, int kPitch>
__device__ __forceinline__ float decay_tile_entry(const Entry* tile, int row, int col) {
  return static_cast<float>(tile[row * kPitch + col]);
}

// Whether the warp's 16x64 strip of a staged tile holds a nonzero entry (NaN counts as nonzero), the same in every
// lane: rows 16 warp.. (the forward and dQ: the warp's query rows), or columns 16 warp.. (dK and dV: the warp's
// keys, the tile read transposed). The lanes read it in 16-byte chunks, the strip's four 16x16 blocks in turn:
// a float32 block is 16 rows of 4 chunks, two per lane, a 16-bit one 16 rows of 2 chunks, one per lane. Each
// quarter-warp's chunks fall in distinct banks: rows two apart at pitch 72 (fp32) or four apart at 68, four rows
// two apart for 16-bit entries.
template <class Entry, int kPitch, bool kColumnReads>
__device__ __forceinline__ bool decay_strip_nonzero(const Entry* tile, int warp, int lane) {
  lane = opaque(lane);  // the lane's offsets are recomputed here, not held through the kernels' loops
  const int quarter = lane / 8;
  int row, col;
  if constexpr (DecayEntries<Entry>::kF32) {
    const int half = (lane / 4) % 2;
    row = kPitch == kDecayTilePitch ? quarter % 2 + (quarter / 2) * 4 + 2 * half : quarter + 4 * half;
    col = 4 * (lane % 4);
  } else {
    row = 2 * ((lane / 2) % 4) + quarter % 2 + 8 * (quarter / 2);
    col = 8 * (lane % 2);
  }
  const Entry* lane_chunk = tile + row * kPitch + col + (kColumnReads ? warp * 16 : warp * 16 * kPitch);
  uint32_t bits = 0;
#pragma unroll
  for (int block = 0; block < 4; ++block) {
    const int block_offset = kColumnReads ? block * 16 * kPitch : block * 16;
    uint4 v = *reinterpret_cast<const uint4*>(lane_chunk + block_offset);
    bits |= v.x | v.y | v.z | v.w;
    if constexpr (DecayEntries<Entry>::kF32) {
      v = *reinterpret_cast<const uint4*>(lane_chunk + block_offset + 8 * kPitch);
      bits |= v.x | v.y | v.z | v.w;
    }
  }
  return __any_sync(0xffffffffu, (bits & DecayEntries<Entry>::kMagnitude) != 0u);
}

// Whether an entry that this thread staged into `tile` (its chunks or elements of stage_decay_tile) is nonzero. Called
// after its copies completed (cp.async.wait_group) and before the barrier that shows them to the other threads:
// OR-ed over the CTA by that barrier (__syncthreads_or), it says whether the tile holds a nonzero entry.
template <class Entry, int kPitch, int Threads>
__device__ __forceinline__ bool staged_decay_nonzero(const Entry* tile, bool vector_rows) {
  uint32_t bits = 0;
  if (vector_rows) {
    constexpr int kChunkEntries = 16 / DecayEntries<Entry>::kBytes;
    constexpr int kChunksPerRow = 64 / kChunkEntries;
    constexpr int kRowsPerPass = Threads / kChunksPerRow;
    const int c = static_cast<int>(threadIdx.x) % kChunksPerRow * kChunkEntries;
#pragma unroll 1
    for (int r = static_cast<int>(threadIdx.x) / kChunksPerRow; r < 64; r += kRowsPerPass) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + r * kPitch + c);
      bits |= v.x | v.y | v.z | v.w;
    }
  } else {
    constexpr int kRowsPerPass = Threads / 64;
    const int c = static_cast<int>(threadIdx.x) % 64;
#pragma unroll 1
    for (int r = static_cast<int>(threadIdx.x) / 64; r < 64; r += kRowsPerPass) {
      if constexpr (DecayEntries<Entry>::kF32) {
        bits |= reinterpret_cast<const uint32_t*>(tile)[r * kPitch + c];
      } else {
        bits |= reinterpret_cast<const uint16_t*>(tile)[r * kPitch + c];
      }
    }
  }
  return (bits & DecayEntries<Entry>::kMagnitude) != 0u;
}

// The stage's tile of `tiles` (two stages after the kernels' other tiles) as entries.
template <class Entry>
__device__ __forceinline__ Entry* decay_tile_stage(unsigned char* tiles, int stage) {
  return reinterpret_cast<Entry*>(tiles + stage * decay_tile_stage_bytes<Entry>());
}
template <class Entry>
__device__ __forceinline__ const Entry* decay_tile_stage(const unsigned char* tiles, int stage) {
  return reinterpret_cast<const Entry*>(tiles + stage * decay_tile_stage_bytes<Entry>());
}

// Calls f(std::type_identity<Entry>{}) with the matrix's entry type: float, or the inputs' Element (a uniform branch).
template <class Element, class F>
__device__ __forceinline__ void with_decay_entry_type(bool f32, F&& f) {
  if (f32) {
    f(std::type_identity<float>{});
  } else {
    f(std::type_identity<Element>{});
  }
}

// stage_decay_tile into stage `stage` of `tiles` for the matrix's entry type (a uniform branch).
template <class Element, bool kColumnReads, int Threads>
__device__ __forceinline__ void stage_decay_tile_of(unsigned char* tiles, int stage, const DecayMatrixOperand& d, int h,
                                                    int row_block, int col_block, int64_t row_limit,
                                                    int64_t col_limit) {
  if (d.f32) {
    stage_decay_tile<float, decay_tile_pitch<float, kColumnReads>(), Threads>(
        decay_tile_stage<float>(tiles, stage), d, h, row_block, col_block, row_limit, col_limit);
  } else {
    stage_decay_tile<Element, decay_tile_pitch<Element, kColumnReads>(), Threads>(
        decay_tile_stage<Element>(tiles, stage), d, h, row_block, col_block, row_limit, col_limit);
  }
}

// decay_strip_nonzero on stage `stage` of `tiles` for the matrix's entry type (a uniform branch).
template <class Element, bool kColumnReads>
__device__ __forceinline__ bool decay_strip_nonzero_of(const unsigned char* tiles, int stage, bool f32, int warp,
                                                       int lane) {
  if (f32) {
    return decay_strip_nonzero<float, decay_tile_pitch<float, kColumnReads>(), kColumnReads>(
        decay_tile_stage<float>(tiles, stage), warp, lane);
  }
  return decay_strip_nonzero<Element, decay_tile_pitch<Element, kColumnReads>(), kColumnReads>(
      decay_tile_stage<Element>(tiles, stage), warp, lane);
}

// staged_decay_nonzero on stage `stage` of `tiles` for the matrix's entry type (a uniform branch).
template <class Element, bool kColumnReads, int Threads>
__device__ __forceinline__ bool staged_decay_nonzero_of(const unsigned char* tiles, int stage,
                                                        const DecayMatrixOperand& d) {
  if (d.f32) {
    return staged_decay_nonzero<float, decay_tile_pitch<float, kColumnReads>(), Threads>(
        decay_tile_stage<float>(tiles, stage), d.vector_rows != 0);
  }
  return staged_decay_nonzero<Element, decay_tile_pitch<Element, kColumnReads>(), Threads>(
      decay_tile_stage<Element>(tiles, stage), d.vector_rows != 0);
}

// The operand copies of a block whose tile check is done (begin_decay_block, begin_single_stage_decay_block): a
// nonzero tile after a zero one had its operands left unfetched (for a causal matrix: the diagonal block after the
// zero ones before it): they are loaded now and waited for. Then load_next_tile() stages the next block's tile, if
// the caller keeps two stages, and the next block's operands go to the other stage unless this tile is zero (zero
// tiles come in runs); `operands_fetched` carries that decision to the next block.
template <class LoadOperands, class LoadNextTile>
__device__ __forceinline__ void fetch_block_operands(bool nonzero_tile, int64_t block, int stage, bool has_next,
                                                     bool& operands_fetched, LoadOperands&& load_operands,
                                                     LoadNextTile&& load_next_tile) {
  const bool late_operands = nonzero_tile && !operands_fetched;
  if (late_operands) {
    load_operands(block, stage);
    commit_async_copies();
  }
  if (has_next) {
    load_next_tile();
    if (nonzero_tile) load_operands(block + 1, stage ^ 1);
  }
  operands_fetched = nonzero_tile;
  commit_async_copies();
  if (late_operands) {
    wait_async_copies<1>();
    __syncthreads();
  }
}

// The start of block `block` of a kernel's two-stage pipeline over a decay matrix's tiles (the grouped forward and
// dQ walk key blocks with their K and V, dK/dV query blocks with their Q, dO and row terms: its `operands`): waits for
// the block's copies and shows them to the CTA; with a decay matrix that barrier also says whether the block's staged
// tile holds a nonzero entry (retention_decay_tile.cuh). Then the block's operands as fetch_block_operands says, the
// next block's tile going to the other stage. Returns whether the block's tile is nonzero (always with gamma).
template <class Element, bool kColumnReads, int Threads, class LoadOperands, class LoadTile>
__device__ __forceinline__ bool begin_decay_block(bool decay_matrix, const unsigned char* decay_tiles,
                                                  const DecayMatrixOperand& d, int64_t block, int stage, bool has_next,
                                                  bool& operands_fetched, LoadOperands&& load_operands,
                                                  LoadTile&& load_tile) {
  wait_async_copies<0>();
  bool nonzero_tile = true;
  if (decay_matrix) {
    nonzero_tile =
        __syncthreads_or(staged_decay_nonzero_of<Element, kColumnReads, Threads>(decay_tiles, stage, d)) != 0;
  } else {
    __syncthreads();
  }
  fetch_block_operands(nonzero_tile, block, stage, has_next, operands_fetched, load_operands, [&] {
    if (decay_matrix) load_tile(block + 1, stage ^ 1);
  });
  return nonzero_tile;
}

// begin_decay_block for the grouped backward kernels, which keep one stage of the matrix's tile (stage 0; two do not
// fit their shared memory): the barrier shows the block's tile and operands, then fetch_block_operands without a next
// tile. The next tile is the caller's to stage, once no warp reads this one: right away after a zero tile (only this
// barrier's check read it),
// else after the barrier that follows the warps' last read of it (their weights), overlapping the block's last MMAs.
template <class Element, bool kColumnReads, int Threads, class LoadOperands>
__device__ __forceinline__ bool begin_single_stage_decay_block(const unsigned char* decay_tile,
                                                               const DecayMatrixOperand& d, int64_t block, int stage,
                                                               bool has_next, bool& operands_fetched,
                                                               LoadOperands&& load_operands) {
  wait_async_copies<0>();
  const bool nonzero_tile =
      __syncthreads_or(staged_decay_nonzero_of<Element, kColumnReads, Threads>(decay_tile, 0, d)) != 0;
  fetch_block_operands(nonzero_tile, block, stage, has_next, operands_fetched, load_operands, [] {});
  return nonzero_tile;
}

}  // namespace attnkit::cuda::retention
