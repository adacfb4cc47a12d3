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
// masked; with a matrix every block is visited and the matrix decides which pairs count.
//
// Work per (query block, key block) pair in units of 2*64*64 FLOPs: row terms Dk + Dv (S and dP), dQ
// 2 Dk + Dv, dK 2 Dk + Dv, dV Dk per value slice + Dv: 5 Dk + 4 Dv + Dk * slices in all when normalising
// (4 Dk + 3 Dv + Dk * slices without), against 3 Dk + 2 Dv for one pass that shares S and dP (which would
// need atomics or a second reduction for dQ): 2.0x (1.6x) at Dk = Dv = 128 (one slice); with gamma only
// the pairs on and below the diagonal. Bytes: per block pair each launch reads the other side's tiles
// (Q, dO or K, V) from L2, and writes its gradient once; a decay matrix is read once per pair by each
// launch (4 or 2 bytes per entry); the row terms are 8 bytes per query row.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim>
struct ParallelBackwardTraits {
  static constexpr int kBlock = 64;  // query rows and keys per block
  static constexpr int kThreads = 128;
  static constexpr int kMaxValueDim = kParallelBackwardMaxValueDim;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kQkTile = kBlock * kQkPitch;
  static constexpr int kRowTermFloats = 4;  // per query row in shared memory: 1/n_t, c_t, its score factor, padding
  static_assert(HeadDim % 16 == 0, "Dk comes in 16-wide MMA k-steps and pairs of 8-wide n-tiles");

  // Rows of the value-side tiles are padded by 8 like the others, so ldmatrix rows fall in distinct banks.
  __host__ __device__ static constexpr int value_pitch(int dv) { return dv + 8; }
  // Three tiles of Dk columns and three of Dv columns (one fixed block, two pipeline stages of the other
  // side), then two stages of row terms.
  __host__ __device__ static constexpr int shared_bytes(int dv) {
    return parallel_backward_shared_bytes(HeadDim, dv, static_cast<int>(sizeof(Element)));
  }
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

// log2(gamma_h): from the params, or the default 1 - 2^(-5-h) computed here.
__device__ __forceinline__ float head_log2_gamma(const ChunkParams& p, int h) {
  if (p.default_gamma) return static_cast<float>(log1p(-exp2(-5.0 - h)) / 0.69314718055994530942);
  return p.log2_gamma[h];
}

// The factor every score of query row t is multiplied by besides the decay power: scale / sqrt(sum_{j<=t}
// gamma^j) with gamma (the closed form the forward uses), scale with a decay matrix (used as given).
__device__ __forceinline__ float query_row_factor(bool decay_matrix, float scale, float ln_gamma, int64_t t) {
  if (decay_matrix) return scale;
  const float rows = static_cast<float>(t + 1);
  const float decay_sum = ln_gamma == 0.0f ? rows : expm1f(rows * ln_gamma) / expm1f(ln_gamma);
  return scale * rsqrtf(decay_sum);
}

__device__ __forceinline__ float sign_of(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

// One row pair's stored 16-bit values at columns (col, col + 1) of `row`, paired or element-wise.
template <class Element>
__device__ __forceinline__ void store_pair(Element* row, int col, uint32_t pair, bool vector_access) {
  if (vector_access) {
    *reinterpret_cast<uint32_t*>(row + col) = pair;
  } else {
    const Element* elements = reinterpret_cast<const Element*>(&pair);
    row[col] = elements[0];
    row[col + 1] = elements[1];
  }
}

}  // namespace attnkit::cuda::retention
