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
// Work per (query block, key block) pair in units of 2*64*64 FLOPs: row terms Dk + Dv (S and dP), dQ
// 2 Dk + Dv, dK 2 Dk + Dv, dV Dk per value slice + Dv: 5 Dk + 4 Dv + Dk * slices in all when normalising
// (4 Dk + 3 Dv + Dk * slices without), against 3 Dk + 2 Dv for one pass that shares S and dP (which would
// need atomics or a second reduction for dQ): 2.0x (1.6x) at Dk = Dv = 128 (one slice); with gamma only
// the pairs on and below the diagonal. Bytes: per block pair each launch reads the other side's tiles
// (Q, dO or K, V) from L2, and writes its gradient once; a decay matrix is read once per pair by each
// launch's CTA (4 or 2 bytes per entry): B (times the dV slices) times the matrix from L2 per launch, about
// once from DRAM (the CTAs sharing a tile run together): at B8 T4096 H16 D128 with an fp32 matrix, 8 GiB from
// L2 and 1 GiB from DRAM per launch. The row terms are 8 bytes per query row. With a matrix, shared memory
// grows by its two tile stages (36 KiB fp32, 18 KiB 16-bit): at Dk = Dv = 128 one CTA per multiprocessor
// instead of two (140 KiB; 122 KiB with a 16-bit matrix).
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

template <class Element, int HeadDim>
struct ParallelBackwardTraits {
  static constexpr int kBlock = 64;  // query rows and keys per block
  static constexpr int kThreads = 128;
  static constexpr int kMaxValueDim = kParallelBackwardMaxValueDim;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kQkTile = kBlock * kQkPitch;
  static constexpr int kDkTiles = HeadDim / 8;  // 8-wide n-tiles of a Dk-wide accumulator
  static constexpr int kRowTermFloats = 4;      // per query row in shared memory: 1/n_t, c_t, its score factor, padding
  static_assert(HeadDim % 16 == 0, "Dk comes in 16-wide MMA k-steps and pairs of 8-wide n-tiles");

  // Rows of the value-side tiles are padded by 8 like the others, so ldmatrix rows fall in distinct banks.
  __host__ __device__ static constexpr int value_pitch(int dv) { return dv + 8; }
  // Three tiles of Dk columns and three of Dv columns (one fixed block, two pipeline stages of the other
  // side), then two stages of row terms; with a decay matrix, two stages of its tile after them
  // (decay_tiles_shared_bytes).
  __host__ __device__ static constexpr int shared_bytes(int dv) {
    return parallel_backward_shared_bytes(HeadDim, dv, static_cast<int>(sizeof(Element)));
  }
  static_assert(parallel_backward_shared_bytes(HeadDim, kMaxValueDim, 2) + kDecayTilesMaxSharedBytes <=
                    kMaxSharedBytesPerBlock,
                "a launch fits shared memory");
};

// Rows [t0, t0 + 64) x `cols` columns (a multiple of 8) of one (batch, head) sequence operand into a shared
// tile of `pitch` elements per row; rows at or past `tokens` become zeros.
template <class Element, int Threads>
__device__ __forceinline__ void load_rows_of_width(Element* tile, int pitch, const Element* head_base,
                                                   int64_t token_stride, int64_t t0, int64_t tokens, int cols,
                                                   bool vector_access) {
  constexpr int kRows = 64;
  if (vector_access) {
    const int vectors_per_row = cols / 8;
    for (int i = static_cast<int>(threadIdx.x); i < kRows * vectors_per_row; i += Threads) {
      const int r = i / vectors_per_row;
      const int c = (i % vectors_per_row) * 8;
      const bool valid = t0 + r < tokens;
      const Element* source = valid ? head_base + (t0 + r) * token_stride + c : head_base;
      copy_16_bytes_async(shared_address(tile + r * pitch + c), source, valid);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < kRows * cols; i += Threads) {
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

// The thread's place in the warp tiles: warp w holds rows 16w..16w+15 of the fixed block; g = lane / 4 and
// quad = lane % 4 as in the MMA fragments (retention_mma.cuh).
struct WarpLane {
  int warp, lane, g, quad;
};

__device__ __forceinline__ WarpLane warp_lane() {
  WarpLane w;
  w.warp = static_cast<int>(threadIdx.x) / 32;
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
