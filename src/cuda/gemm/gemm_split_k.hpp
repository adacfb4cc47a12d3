// Split-K with a separate, ordered reduction, for small output grids with a long K (decode-like M against
// N = 4096, 256 x 256 x 65536): the K loop is cut into `slices` equal slices, one tensor-core GEMM computes
// every slice's product as one batched problem (slice l reads A and B from K offset l * K / slices, and
// writes its fp32 partial sums to its own M x N buffer in the workspace: no slice waits for another), and a
// second kernel sums the slices in slice order, C = alpha * sum + beta * C, into C's type. The sum's order
// is fixed, so results are bitwise repeatable.
//
// Why not stream-K alone: CUTLASS's stream-K scheduler reduces the partial tiles of an output tile in place,
// each peer waiting for the one before it (its deterministic mode), so a tile split among p CTAs pays p
// reductions one after another. With 4 output tiles and 132 SMs that is 33 peers a tile, and the chain takes
// longer than the multiply-adds. Here the slices run in parallel and their sum costs one pass over
// slices x M x N fp32 values, small beside A and B whenever the grid is small.
//
// The rule (gemm_split_k_slices): batch 1, fewer output tiles than a third of the SMs (each tile then has
// at least three slices), and a slice count that divides K into slices of at least 4 K tiles whose start
// offsets keep TMA's 16-byte alignment; the largest such count that keeps the slices' tiles in one wave. fp32
// (TF32 and 3xTF32 rows) also splits in two where its tiles fill at most half the SMs: its rows have no 64-row
// tiles to fill the device with (1024 x 1024 x 16384 is 64 tiles of 128 x 128, 32 of the TF32 rows' 128 x 256,
// one K loop of 16384 each), while the 16-bit rows' 64 x 128 tiles do that without the partial sums.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "cuda/gemm/gemm_shape.hpp"

namespace attnkit::cuda::gemm {

inline constexpr int kMinSplitKSlices = 3;
inline constexpr int kMinSplitKSlicesFp32 = 2;
inline constexpr int kMaxSplitKSlices = 64;
inline constexpr int kMinSplitKTilesPerSlice = 4;  // K tiles each slice's main loop runs at least

// The slice count for `shape` on a kernel with tiles of tile_m x tile_n x tile_k and a device of
// `multiprocessors` SMs; 0 when split-K does not apply (see above). least_16_bit: the fewest slices of a 16-bit
// problem (the 64-row swapped rows: 2).
int gemm_split_k_slices(const GemmShape& shape, int tile_m, int tile_n, int tile_k, int multiprocessors,
                        int least_16_bit = kMinSplitKSlices);

// The slice count of a swapped split-K row (C^T = B^T A^T: tile_m of the problem's M is the tile's 64 wgmma
// columns). The rule above; and for fp32 (TF32, 3xTF32), where it gives none, one slice when M fits one column of
// tiles (M <= tile_m, batch 1, K a multiple of 4): the weight B is then read once, its tiles alone fill the grid (fp32
// decode against N 14336-16384: 112-128 tiles of 128 weight rows), and the tokens pad to 64 wgmma columns instead of
// the 128 or 256 rows of the other fp32 rows' tiles. The partial sums of one slice are M x N fp32 (1 MiB at 16 x
// 16384), small beside the weight (256 MiB). The 16-bit rows keep the rule above (their 64 x 128 ping-pong rows take
// those grids). A token tile narrower than 64 columns (tile_m: the 64-row ping-pong rows' 16) takes only M <= tile_m,
// in one slice where its weight tiles fill 0.9 to 2 waves, else by the rule above with least_16_bit slices.
int gemm_swapped_split_k_slices(const GemmShape& shape, int tile_m, int tile_n, int tile_k, int multiprocessors,
                                int least_16_bit = kMinSplitKSlices);

// Bytes of the fp32 partial sums of `slices` slices of shape's M x N (256-byte aligned).
int64_t gemm_split_k_partial_bytes(const GemmShape& shape, int slices);

// C = alpha * sum over l < slices of partials[l * m * n + i * n + j] + beta * C, in slice order, C of
// shape's dtype (f16, bf16 or f32) at shape.c with row stride shape.c_row. Needs N a multiple of 4, C and its row
// stride aligned to 4 elements (the Hopper rows' 16-byte rule gives it). programmatic: launched as a programmatic
// dependent of the kernel before it on the stream (compute capability 9.0 and newer; gemm_split_k.cu).
void sum_split_k_slices(const GemmShape& shape, const float* partials, int slices, float alpha, float beta,
                        int multiprocessors, cudaStream_t stream, bool programmatic = false);

// What a runner holds for a kernel whose CTAs each write one K slice's fp32 partial sums (C itself when K is one
// slice), which sum_split_k_slices then adds into C in slice order (the narrow kernels, gemm_narrow.hpp).
// programmatic: the sum is launched as a programmatic dependent (compute capability 9.0 and newer; the kernel calls
// signal_dependents once its CTA's partial sums are computed, before it writes them).
class SplitKSlices {
 public:
  SplitKSlices(const GemmShape& shape, int slices, int multiprocessors, bool programmatic);
  int count() const { return slices_; }
  int64_t workspace_bytes() const { return partial_bytes_; }
  // The partial sums' place in the run's workspace; null with one slice (the kernel writes C).
  float* partials(void* workspace) const { return slices_ > 1 ? static_cast<float*>(workspace) : nullptr; }
  // After the kernel: the ordered sum into C (nothing with one slice).
  void sum(const GemmShape& shape, void* workspace, float alpha, float beta, cudaStream_t stream) const;

 private:
  int slices_;
  int multiprocessors_;
  bool programmatic_;
  int64_t partial_bytes_ = 0;
};

}  // namespace attnkit::cuda::gemm
