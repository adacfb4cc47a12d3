// Shared pieces of the parallel form's backward on tensor cores (SM80+ mma.sync): RetNet's normalised
// retention with per-head gamma, and retention over an explicit decay matrix (normalised or not). Per
// (batch, head), with D_tm the decay weight (gamma^(t-m) / sqrt(sum_{j<=t} gamma^j) for m <= t, or the
// matrix entry), s_tm = scale D_tm (q_t . k_m), a_t = sum_m |s_tm|, n_t = max(a_t, 1) when normalising
// (else 1) and o_t = sum_m s_tm v_m / n_t:
//   dp_tm = dO_t . v_m,   c_t = [normalising and a_t > 1] (sum_m dp_tm s_tm) / n_t^2,
//   ds_tm = dp_tm / n_t - sign(s_tm) c_t,
//   dq_t = sum_m ds_tm scale D_tm k_m,   dk_m = sum_t ds_tm scale D_tm q_t,   dv_m = sum_t (s_tm / n_t) dO_t.
// Four launches on one stream, each a role of one of two kernels (ParallelBackwardRole):
//   row terms (normalising only): per query row, 1/n_t and c_t into ChunkParams::row_terms [B, H, Tq, 2];
//   dQ (retention_parallel_query_backward_kernel.cuh): one CTA per 64-row query block walks the key blocks;
//   dK and dV (retention_parallel_key_backward_kernel.cuh): one CTA per 64-key block (and, for dV, per
//   value slice of Dk or 64 columns) walks the query blocks.
// Every gradient element is owned by one CTA and summed in a fixed order: deterministic, no atomics.
// With gamma, blocks above the diagonal are skipped (no launch visits them) and the diagonal block is
// masked; with a matrix every block is visited, its tile of the matrix staged in shared memory with the walked
// side's tiles (retention_decay_tile.cuh), and a warp skips the pairs where its 16 rows (keys) of the tile are zero.
//
// Batch grouping (the matrix form, Members = kDecayMatrixMembers, where its shared memory fits): the matrix does not
// depend on the batch, so one CTA of 8 warps computes Members (batch, value slice) pairs of one (head, block) -- the
// batches for row terms, dQ and dK, (batch, slice) pairs slice fastest for dV -- each member being the 4 warps above
// with its own tiles; all the CTA's threads stage each tile of the matrix once for all members, and the members walk
// the blocks in lockstep. Two members' tiles leave room for one stage of the matrix's tile only (Dk = Dv = 128 with
// float32 entries: 2 x 104 + 18 = 226 KiB of the 227), so the next tile is staged once every warp has read the
// current one (its weights), overlapping the block's last MMAs (dQ, dK: the Dk-wide product; dV: the slice's),
// a second barrier per block (begin_single_stage_decay_block, retention_decay_tile.cuh). The plan runs one member per
// CTA where the grouped CTA does not fit (Dv = 256, or a device below SM90's 227 KiB).
//
// Work per (query block, key block) pair in units of 2*64*64 FLOPs: row terms Dk + Dv (S and dP), dQ
// 2 Dk + Dv, dK 2 Dk + Dv, dV Dk per value slice + Dv: 5 Dk + 4 Dv + Dk * slices in all when normalising
// (4 Dk + 3 Dv + Dk * slices without), against 3 Dk + 2 Dv for one pass that shares S and dP (which would
// need atomics or a second reduction for dQ): 2.0x (1.6x) at Dk = Dv = 128 (one slice); with gamma only
// the pairs on and below the diagonal. Bytes: per block pair each launch reads the other side's tiles
// (Q, dO or K, V) from L2, and writes its gradient once; a decay matrix is read once per pair by each
// launch's CTA (4 or 2 bytes per entry): B (times the dV slices) / Members times the matrix from L2 per launch,
// about once from DRAM (the CTAs sharing a tile run together). At B8 T4096 H16 D128 with a causal fp32 matrix, per
// launch: the matrix 8 GiB from L2 with one member, 4 GiB with two; the walked side's operands (32 KiB per fetched
// block: Q and dO, or K and V) of about 33.5 of the 64 blocks per (pair, block) (the nonzero tiles and the one
// fetched before a zero run is known), 8.4 GiB either way; 1 GiB from DRAM. The row terms are 8 bytes per query
// row. Shared memory with a matrix, one member: its tiles plus two tile stages (36 KiB fp32, 18 KiB 16-bit), at
// Dk = Dv = 128 one CTA of 4 warps per multiprocessor (140 KiB; 122 KiB with a 16-bit matrix); two members: 226 KiB
// (217 KiB), one CTA of 8 warps.
//
// Both kernels share this file's setup: the shared-memory layout (ParallelBackwardTiles), the thread's
// place in the warp tiles (WarpLane) and the (batch, head) setup (ParallelBackwardHead); the decay
// weights, row factors and tile products are those of the forward (retention_normalized_kernel.cuh,
// retention_decay_tile.cuh, retention_mma.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_chunk_kernel.cuh"
#include "cuda/retention/retention_fragments.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_normalized_kernel.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int Members = 1>
struct ParallelBackwardTraits {
  static constexpr int kBlock = 64;         // query rows and keys per block
  static constexpr int kMembers = Members;  // (batch, value slice) pairs per CTA, 4 warps each (see below)
  static constexpr int kMemberThreads = 128;
  static constexpr int kThreads = kMemberThreads * Members;
  static constexpr int kMaxValueDim = kParallelBackwardMaxValueDim;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kQkTile = kBlock * kQkPitch;
  static constexpr int kDkTiles = HeadDim / 8;  // 8-wide n-tiles of a Dk-wide accumulator
  static constexpr int kRowTermFloats = 4;      // per query row in shared memory: 1/n_t, c_t, its score factor, padding
  static_assert(HeadDim % 16 == 0, "Dk comes in 16-wide MMA k-steps and pairs of 8-wide n-tiles");

  // Rows of the value-side tiles are padded by 8 like the others, so ldmatrix rows fall in distinct banks.
  __host__ __device__ static constexpr int value_pitch(int dv) { return dv + 8; }
  // Per member: three tiles of Dk columns and three of Dv columns (one fixed block, two pipeline stages of the
  // other side), then two stages of row terms; the members' sets one after another. With a decay matrix its tile
  // after them: two stages with one member (decay_tiles_shared_bytes), one stage with several
  // (parallel_backward_grouped_shared_bytes).
  __host__ __device__ static constexpr int member_shared_bytes(int dv) {
    return parallel_backward_shared_bytes(HeadDim, dv, static_cast<int>(sizeof(Element)));
  }
  __host__ __device__ static constexpr int shared_bytes(int dv) { return Members * member_shared_bytes(dv); }
  static_assert(parallel_backward_shared_bytes(HeadDim, kMaxValueDim, 2) + kDecayTilesMaxSharedBytes <=
                    kMaxSharedBytesPerBlock,
                "a launch fits shared memory");
};

// Rows [t0, t0 + 64) x `cols` columns (a multiple of 8) of one (batch, head) sequence operand into a shared
// tile of `pitch` elements per row; rows at or past `tokens` become zeros.
template <class Element, int Threads>
__device__ __forceinline__ void load_rows_of_width(Element* tile, int pitch, const Element* head_base,
                                                   int64_t token_stride, int64_t t0, int64_t tokens, int cols,
                                                   bool vector_access, int thread = static_cast<int>(threadIdx.x)) {
  constexpr int kRows = 64;
  if (vector_access) {
    const int vectors_per_row = cols / 8;
    for (int i = thread; i < kRows * vectors_per_row; i += Threads) {
      const int r = i / vectors_per_row;
      const int c = (i % vectors_per_row) * 8;
      const bool valid = t0 + r < tokens;
      const Element* source = valid ? head_base + (t0 + r) * token_stride + c : head_base;
      copy_16_bytes_async(shared_address(tile + r * pitch + c), source, valid);
    }
  } else {
    for (int i = thread; i < kRows * cols; i += Threads) {
      const int r = i / cols;
      const int c = i % cols;
      tile[r * pitch + c] = t0 + r < tokens ? head_base[(t0 + r) * token_stride + c] : Element(0.0f);
    }
  }
}

__device__ __forceinline__ float sign_of(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

// Shared memory of both kernels: the CTA's fixed block (Q for dQ, K for dK and dV) as a Dk-wide tile, two
// pipeline stages of the walked side's Dk-wide tiles (K or Q), then the same for the Dv-wide tiles (dO
// fixed and V walked, or V fixed and dO walked), then two stages of row terms (the key side only).
template <class Element>
struct ParallelBackwardTiles {
  Element* fixed_qk;
  Element* staged_qk;  // [2][kQkTile]
  Element* fixed_v;
  Element* staged_v;     // [2][v_tile_elements]
  float* row_terms;      // [2][64][kRowTermFloats]
  unsigned char* decay;  // two stages of the decay matrix's tile (retention_decay_tile.cuh), with a matrix
  int v_tile_elements;
};

template <class Traits, class Element>
__device__ __forceinline__ ParallelBackwardTiles<Element> parallel_backward_tiles(unsigned char* shared, int v_pitch) {
  ParallelBackwardTiles<Element> tiles;
  tiles.v_tile_elements = Traits::kBlock * v_pitch;
  tiles.fixed_qk = reinterpret_cast<Element*>(shared);
  tiles.staged_qk = tiles.fixed_qk + Traits::kQkTile;
  tiles.fixed_v = tiles.staged_qk + 2 * Traits::kQkTile;
  tiles.staged_v = tiles.fixed_v + tiles.v_tile_elements;
  tiles.row_terms = reinterpret_cast<float*>(tiles.staged_v + 2 * tiles.v_tile_elements);
  tiles.decay = reinterpret_cast<unsigned char*>(tiles.row_terms + 2 * Traits::kBlock * Traits::kRowTermFloats);
  return tiles;
}

// The thread's place in the warp tiles: warp w (of its member's 4) holds rows 16w..16w+15 of the fixed block;
// g = lane / 4 and quad = lane % 4 as in the MMA fragments (retention_mma.cuh). member_thread: the thread's index
// within its member's 128.
struct WarpLane {
  int warp, lane, g, quad;
};

__device__ __forceinline__ WarpLane warp_lane(int member_thread = static_cast<int>(threadIdx.x)) {
  WarpLane w;
  w.warp = member_thread / 32;
  w.lane = static_cast<int>(threadIdx.x) % 32;
  w.g = w.lane / 4;
  w.quad = w.lane % 4;
  return w;
}

// What both kernels know of their (batch b, head h): the decay (log2 and ln of gamma; a matrix's tiles are staged
// by the kernels) and the head's sequences.
template <class Element>
struct ParallelBackwardHead {
  float log2_gamma, ln_gamma;
  const Element *q, *k, *v, *grad_out;
};

template <class Element>
__device__ __forceinline__ ParallelBackwardHead<Element> parallel_backward_head(const ChunkParams& p, int64_t b,
                                                                                int h) {
  ParallelBackwardHead<Element> head;
  head.log2_gamma = head_log2_gamma(p, h);
  head.ln_gamma = head.log2_gamma * 0.69314718055994530942f;
  head.q = head_rows<Element>(p.q, b, h);
  head.k = head_rows<Element>(p.k, b, h);
  head.v = head_rows<Element>(p.v, b, h);
  head.grad_out = head_rows<Element>(p.grad_out, b, h);
  return head;
}

}  // namespace attnkit::cuda::retention
