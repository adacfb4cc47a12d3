// The map of a decay matrix's nonzero tiles that the Hopper decay-matrix kernel walks
// (retention_wgmma_matrix_kernel.cuh): one CTA per (matrix, 128-row query block, 64-key block) reads the tile's
// entries (16-byte loads; the piece that ends past Tk entry by entry) and writes one byte: bit 0 when rows 0-63 of
// the tile hold an entry other than +-0, bit 1 for rows 64-127 (NaN and infinities count as nonzero). Padding bytes
// of a map row (past the last key block) are written 0. The read is the whole matrix once (a causal float32
// [16, 4096, 4096] matrix: 1 GiB, about 0.25 ms at an H200's copy rate); the kernel that follows then reads only the
// nonzero tiles, and issues their K and V without first waiting for their entries.
#pragma once
#include <cstdint>

#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

inline constexpr int kDecayMapThreads = 256;

// The call's decay matrices: one per head, or one that the heads share (head stride 0).
ATTNKIT_HOST_DEVICE int64_t decay_matrices(const ChunkParams& p) { return p.decay.head != 0 ? p.heads : 1; }
// Head h's matrix: h, or 0 for a shared one.
ATTNKIT_HOST_DEVICE int decay_matrix_of_head(const ChunkParams& p, int h) { return p.decay.head != 0 ? h : 0; }
// The map row of (matrix, 128-row query block): decay_map_row_bytes(Tk) bytes.
__device__ __forceinline__ unsigned char* decay_map_row(const ChunkParams& p, int64_t matrix, int64_t query_block) {
  return p.decay.tile_map + (matrix * ((p.tokens + 127) / 128) + query_block) * decay_map_row_bytes(p.tokens_k);
}

// grid (decay_map_row_bytes(Tk), ceil(Tq / 128), matrices); p: the decay-matrix kernel's params. Internal linkage: each
// instance file that launches it has its own copy.
static __global__ void __launch_bounds__(kDecayMapThreads)
    retention_decay_map_kernel(const __grid_constant__ ChunkParams p) {
  const DecayMatrixOperand& d = p.decay;
  const int64_t block = blockIdx.x;
  const int64_t query_block = blockIdx.y;
  const int64_t matrix = blockIdx.z;
  const int64_t key_blocks = (p.tokens_k + 63) / 64;
  unsigned char* out = decay_map_row(p, matrix, query_block) + block;
  if (block >= key_blocks) {
    if (threadIdx.x == 0) *out = 0;
    return;
  }
  const int entry_bytes = d.f32 != 0 ? 4 : 2;
  const int pieces = entry_bytes * 4;  // 16-byte pieces a row of 64 entries
  const int rows_per_pass = kDecayMapThreads / pieces;
  const int tid = static_cast<int>(threadIdx.x);
  const int c = tid % pieces;
  const int64_t q0 = query_block * 128, k0 = block * 64;
  const int64_t key_bytes_left = (p.tokens_k - k0) * entry_bytes - 16 * c;
  const int bytes = key_bytes_left >= 16 ? 16 : key_bytes_left > 0 ? static_cast<int>(key_bytes_left) : 0;
  const auto* base =
      static_cast<const unsigned char*>(d.data) + (matrix * d.head + q0 * d.row + k0) * entry_bytes + 16 * c;
  const int64_t row_bytes = d.row * entry_bytes;
  const uint32_t magnitude = entry_bytes == 4 ? 0x7fffffffu : 0x7fff7fffu;
  uint32_t rows_lo = 0, rows_hi = 0;  // nonzero bits of the tile's rows 0-63 and 64-127
#pragma unroll 4
  for (int r = tid / pieces; r < 128; r += rows_per_pass) {
    if (q0 + r >= p.tokens || bytes == 0) continue;
    const unsigned char* piece = base + r * row_bytes;
    uint32_t any = 0;
    if (bytes == 16) {
      const uint4 words = __ldg(reinterpret_cast<const uint4*>(piece));
      any = (words.x | words.y | words.z | words.w) & magnitude;
    } else {
      // The row's last piece, past Tk: its entries inside the row one by one.
      for (int at = 0; at < bytes; at += entry_bytes) {
        const uint32_t entry = entry_bytes == 4 ? __ldg(reinterpret_cast<const uint32_t*>(piece + at))
                                                : __ldg(reinterpret_cast<const uint16_t*>(piece + at));
        any |= entry & (entry_bytes == 4 ? 0x7fffffffu : 0x7fffu);
      }
    }
    if (r < 64) {
      rows_lo |= any;
    } else {
      rows_hi |= any;
    }
  }
  const int lo = __syncthreads_or(rows_lo != 0);
  const int hi = __syncthreads_or(rows_hi != 0);
  if (tid == 0) *out = static_cast<unsigned char>((lo != 0 ? 1 : 0) | (hi != 0 ? 2 : 0));
}

}  // namespace attnkit::cuda::retention
