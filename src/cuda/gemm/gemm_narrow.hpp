// The fp32 GEMM for a few rows of A: decode-like problems, M <= 32 tokens against an fp32 weight B of K x N with N
// contiguous (x @ W, W row-major). The tensor-core rows pad such an M to a 128-row tile and run 3xTF32 at a sixth of
// the 16-bit rate: at M = 1 against 16384 x 4096 that is 17 GFLOP of padded work for 0.13 GFLOP of product. The
// floor of these problems is B's bytes or their fp32 multiply-adds, whichever is longer; by the data sheets
// (estimates, not measurements): B of 16384 x 4096 fp32 is 256 MiB, about 60 us at an H200's 4.3 TB/s, and
// 32 x 16384 x 4096 FMA about 65 us at an H100's or H200's 33.5 TFMA/s (67 TFLOP/s fp32), 16 rows half that. This
// kernel streams B once with 16-byte loads and multiplies on the CUDA cores in fp32 (exact to fp32 rounding, like
// the SIMT fallback): each CTA owns 128 columns of C and a slice of K; its 8 warps take interleaved rows of B, each
// lane 4 columns, every row's A values read from shared memory as a broadcast; the warps' sums are added in warp
// order, and the K slices' fp32 partial sums in slice order by the split-K sum (gemm_split_k.hpp), so results are
// bitwise repeatable. It runs for any allow_tf32 (exact fp32 is within both bounds).
//
// The rule (narrow_gemm_refusal): fp32, batch 1 (a batch sharing B is folded into M first), 1 <= M <= 32 (33-64 for
// the exact-only entry, below), B
// MN-major with a 16-byte aligned base and row stride, N a multiple of 4, C 16-byte aligned with a row stride of a
// multiple of 4 (the slices' sum writes 4 elements at a time), and enough columns x K for the CTAs to cover every SM
// (narrow_gemm_slices); A through its strides, any alignment. Other problems run on the registry's other rows.
#pragma once
#include <string>

#include "cuda/gemm/gemm_kernel.hpp"

namespace attnkit::cuda::gemm {

inline constexpr int kNarrowMaxRows = 32;
inline constexpr int kNarrowExactMaxRows = 64;  // the exact-only entry: 33-64 rows, two row blocks of 32
inline constexpr int kNarrowColumns = 128;      // columns of C per CTA: 32 lanes x 4
inline constexpr int kNarrowMinSliceK = 512;    // rows of B a K slice streams at least
inline constexpr int kNarrowMaxSlices = 32;
inline constexpr int kNarrowCtasPerSm = 2;  // the CTAs per SM the slice count aims at (loads in flight)

// The K slices of `shape` on `multiprocessors` SMs: enough for ceil(N / 128) x row blocks x slices CTAs to reach two
// per SM, at most 32 and at least 512 rows of B each (at least 1).
int narrow_gemm_slices(const GemmShape& shape, int multiprocessors);

// Empty when the narrow kernel's first entry (M <= 32) computes `shape` on `device`, else why not (the rule above).
std::string narrow_gemm_refusal(const GemmShape& shape, const GemmDevice& device);

// The registry entries (tier narrow, fp32, SIMT math, B MN-major, any A): M 1-32 whether TF32 is allowed or not, and
// M 33-64 only without TF32 (exact_only: there the TF32 rows' tensor cores outrun fp32 FMA, while 3xTF32 on a
// 128-row tile does 2-4x the work of M at a sixth of the 16-bit rate).
const GemmKernel& narrow_gemm_kernel();
const GemmKernel& narrow_exact_gemm_kernel();

}  // namespace attnkit::cuda::gemm
