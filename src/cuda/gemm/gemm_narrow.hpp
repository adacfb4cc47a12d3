// The fp32 GEMM for a few rows of A: decode-like problems, M <= 16 tokens against an fp32 weight B of K x N with N
// contiguous (x @ W, W row-major). Their time is B's bytes (16384 x 4096 fp32: 256 MiB, 60-80 us of DRAM time on
// an H100 / H200), not their multiply-adds (16 x 16384 x 4096 fp32 FMA: about 35 us of an H100's CUDA cores),
// while the tensor-core rows pad M to a 128-row tile and run 3xTF32 at a sixth of the 16-bit rate (8x the work of
// M = 16). This kernel streams B once with 16-byte loads and multiplies on the CUDA cores in fp32 (exact to fp32
// rounding, like the SIMT fallback): each CTA owns 128 columns of C and a slice of K; its 8 warps take
// interleaved rows of B, each lane 4 columns, every row's A values read from shared memory as a broadcast; the
// warps' sums are added in warp order, and the K slices' fp32 partial sums in slice order by the split-K sum
// (gemm_split_k.hpp), so results are bitwise repeatable. It runs for any allow_tf32 (exact fp32 is within both
// bounds).
//
// The rule (narrow_gemm_refusal): fp32, batch 1 (a batch sharing B is folded into M first), 1 <= M <= 16, B
// MN-major with a 16-byte aligned base and row stride, N a multiple of 4, C 16-byte aligned with a row stride of a
// multiple of 4 (the slices' sum writes 4 elements at a time), and enough columns x K for the CTAs to cover every SM
// (narrow_gemm_slices); A through its strides, any alignment. Other problems run on the registry's other rows.
#pragma once
#include <string>

#include "cuda/gemm/gemm_kernel.hpp"

namespace attnkit::cuda::gemm {

inline constexpr int kNarrowMaxRows = 16;
inline constexpr int kNarrowColumns = 128;    // columns of C per CTA: 32 lanes x 4
inline constexpr int kNarrowMinSliceK = 512;  // rows of B a K slice streams at least
inline constexpr int kNarrowMaxSlices = 32;
inline constexpr int kNarrowCtasPerSm = 2;  // the CTAs per SM the slice count aims at (loads in flight)

// The K slices of `shape` on `multiprocessors` SMs: enough for ceil(N / 128) x slices CTAs to reach two per SM,
// at most 32 and at least 512 rows of B each (at least 1).
int narrow_gemm_slices(const GemmShape& shape, int multiprocessors);

// Empty when the narrow kernel computes `shape` on `device`, else why not (the rule above).
std::string narrow_gemm_refusal(const GemmShape& shape, const GemmDevice& device);

// The registry entry (tier narrow, fp32, SIMT math, B MN-major, any A).
const GemmKernel& narrow_gemm_kernel();

}  // namespace attnkit::cuda::gemm
