// The fp32 GEMM for a few rows of A: decode-like problems, M <= 64 tokens against an fp32 weight, B of K x N either
// N-contiguous (x @ W, W row-major [K, N]) or K-contiguous (x @ W^T, W row-major [N, K]: nn.Linear's layout). The
// tensor-core rows pad such an M to a 128-row tile and run 3xTF32 at a sixth of the 16-bit rate: at M = 1 against
// 16384 x 4096 that is 17 GFLOP of padded work for 0.13 GFLOP of product. The floor of these problems is B's bytes
// or their fp32 multiply-adds, whichever is longer; by the data sheets (estimates, not measurements): B of
// 16384 x 4096 fp32 is 256 MiB, about 60 us at an H200's 4.3 TB/s, and 32 x 16384 x 4096 FMA about 65 us at an
// H100's or H200's 33.5 TFMA/s (67 TFLOP/s fp32), 16 rows half that. This kernel streams B once with 16-byte loads
// and multiplies on the CUDA cores in fp32 (exact to fp32 rounding, like the SIMT fallback), a CTA on a block of
// columns of C and a slice of K (gemm_narrow.cu: 128 columns with B N-contiguous, 32 with B K-contiguous); partial
// sums are added in a fixed order (warps, lanes, then the K slices by the split-K sum, gemm_split_k.hpp, launched as a
// programmatic dependent on compute capability 9.0 so that it is scheduled during the kernel's tail), so results are
// bitwise repeatable.
//
// The rule (refusals of the entries below): fp32, batch 1 (a batch sharing B is folded into M first), 1 <= M <= 32
// (33-64 for the exact-only entries), B of the entry's majorness with a 16-byte aligned base and a leading dimension
// of a multiple of 4 (K too when B is K-major), N a multiple of 4, C 16-byte aligned with a row stride of a multiple
// of 4 (the slices' sum writes 4 elements at a time), and enough columns x row blocks x K slices for the CTAs to
// cover every SM (narrow_gemm_slices); A through its strides, any alignment. Other problems run on the registry's
// other rows.
// 16-bit operands (bf16, f16; narrow_16_bit_gemm_kernel) run the B MN-major kernel for M <= 4 on 256 columns a CTA so
// that a warp still reads 512 contiguous bytes of a row of B per load, N a multiple of 8; a 16-bit B K-major runs on
// the tensor-core rows (the K-major form of this kernel measured slower there). Why (H200, docs/perf.md, 2026-11-27):
// at 1 x 16384 x 4096 bf16 every tensor-core row streamed the 32 MiB weight at about 3.4 TB/s (38-41 us; cuBLAS 33),
// where this kernel's fp32 form streams its 256 MiB at 4.0-4.1 TB/s.
#pragma once
#include <string>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_shape.hpp"

namespace attnkit::cuda::gemm {

inline constexpr int kNarrowMaxRows = 32;
inline constexpr int kNarrow16MaxRows = 4;  // the 16-bit entries' rows (one 4-row instance, B MN-major)
// The automatic choice runs the 16-bit entries for M = 1, and for M = 2 when N >= K (narrow_16_bit_automatic; a forced
// config or the tuner for the rest of M <= 4). Measured on an H200 (2026-11-27, docs/perf.md), kernel-only against
// cuBLAS: M = 1 0.86-0.98x on them against 0.52-0.82x on the 64 x 128 ping-pong rows; M = 2 (the 4-row instance's
// two-row path) 0.87-0.91x against the registry's 0.81-0.83x at N 14336-16384, K 4096, but 0.88 / 0.96x (bf16 / f16)
// against the swapped split-K rows' 0.90 / 1.00x at 2 x 4096 x 16384; M = 4 level with the ping-pong rows.
inline constexpr int kNarrow16AutoMaxRows = 2;
inline constexpr int kNarrowExactMaxRows = 64;   // the exact-only entries: 33-64 rows (row blocks, gemm_narrow.cu)
inline constexpr int kNarrowColumns = 128;       // columns of C per CTA, B MN-major: 32 lanes x 4
inline constexpr int kNarrowKMajorColumns = 32;  // columns of C per CTA, B K-major: 8 warps x 4
// The automatic choice (gemm_registry.cpp) measured on an H200 (docs/perf.md, 2026-11-26): with TF32 allowed the narrow
// kernel ran 0.71-0.88x cuBLAS at M <= 8 but 0.27-0.85x at M 16-32, where the TF32 tensor-core rows take over; the
// exact 33-64-row entries ran 0.35-0.43x cuBLAS SGEMM, so only a forced config or the tuner runs them. Against the
// TF32 swapped split-K row (2026-11-27, kernel-only): M 4, the narrow kernel's 4-row instance, 21.6 us against 25.2 at
// 4 x 4096 x 4096; M 8, its 16-row instance (which M 5-16 run), 27.5 against 24.3 us: on compute capability 9.0, where
// those rows exist, TF32 keeps it for M <= 4 (kNarrowTf32MaxRowsSm90).
inline constexpr int kNarrowTf32MaxRows = 8;
inline constexpr int kNarrowTf32MaxRowsSm90 = 4;

// The most rows the narrow kernel runs with TF32 allowed on a device of `capability` (major x 10 + minor).
inline constexpr int narrow_tf32_max_rows(int capability) {
  return capability == 90 ? kNarrowTf32MaxRowsSm90 : kNarrowTf32MaxRows;
}
inline constexpr int kNarrowMinSliceK = 512;  // rows of B a K slice streams at least
inline constexpr int kNarrowMaxSlices = 32;
// The CTAs per SM the slice count aims at, and at most: the 4- and 16-row instances' registers (101-128 a thread, 256
// threads) hold two CTAs an SM, so a grid of more than two per SM ran its last CTAs in a second, partial wave (1 x 4096
// x 16384: 288 CTAs on 264 places, the last 24 streaming 0.9 MB each alone after the others; 1 x 16384 x 4096: 384).
inline constexpr int kNarrowCtasPerSm = 2;

// The K slices of `shape` on `multiprocessors` SMs: as many as keep column blocks x row blocks x slices CTAs within two
// per SM (one wave), at most 32 and at least 512 rows of B each (at least 1).
int narrow_gemm_slices(const GemmShape& shape, int multiprocessors);
// The same rule for `blocks` CTAs a slice and K values of K (the 3xTF32 entry's blocks are its own).
int narrow_slices_for(int64_t blocks, int64_t k, int multiprocessors);

// Empty when `shape` meets the narrow kernels' operand rule (above) for `dtype`, B's majorness and M in [least, most],
// their CTA count aside, else why not.
std::string narrow_operand_refusal(const GemmShape& shape, DType dtype, bool k_major, int64_t least, int64_t most);
// Empty when the narrow kernel's first entry (M <= 32, B MN-major) computes `shape` on `device`, else why not.
std::string narrow_gemm_refusal(const GemmShape& shape, const GemmDevice& device);

// The registry entries (tier narrow, fp32, SIMT math, any A), B MN-major: M 1-32 whether TF32 is allowed or not, and
// M 33-64 only without TF32 (exact_only: there the TF32 rows' tensor cores outrun fp32 FMA, while 3xTF32 on a
// 128-row tile does 2-4x the work of M at a sixth of the 16-bit rate).
const GemmKernel& narrow_gemm_kernel();
const GemmKernel& narrow_exact_gemm_kernel();
// The same for a K-major B (x @ W^T, W row-major [N, K]: nn.Linear's layout), K and B's column stride multiples of 4.
const GemmKernel& narrow_k_major_gemm_kernel();
const GemmKernel& narrow_k_major_exact_gemm_kernel();
// The 3xTF32 tensor-core entries (gemm_narrow_3xtf32.cu): fp32, B K-major (x @ W^T; K and B's column stride multiples
// of 4) or N-major (x @ W; B's row stride a multiple of 4), M kNarrow3xTf32MinRows-32 (`rows` 32) or 33-64 (`rows`
// 64), fp32-level error (three TF32 products a multiply-add, mma.sync, compute capability 8.0 and newer). Measured on
// an H200 (docs/perf.md, 2026-11-27): x @ W^T at M 17-32 1.13-1.56x cuBLAS SGEMM where the SIMT K-major entry ran
// 0.74-0.95x. Listed before the SIMT entries, so the automatic choice runs them on those rows without TF32 (with TF32
// allowed the TF32 rows take M above narrow_tf32_max_rows, as for every narrow entry). Where they refuse (too few CTAs
// for the SMs) the SIMT entries and then the tensor-core rows are next.
inline constexpr int kNarrow3xTf32MinRows = 17;
const GemmKernel& narrow_3xtf32_gemm_kernel(bool b_k_major, int rows);
// The automatic choice runs the 64-row entries up to M 48 (narrow_3xtf32_automatic); M 49-64 only when forced or
// tuned. Measured on an H200 (docs/perf.md, 2026-11-27, per call against cuBLAS SGEMM, x @ W / x @ W^T): M 33 1.03 /
// 1.26x, 40 x 11008 x 4096 0.96 / 1.05x, M 48 0.93 / 1.15x (the registry's rows before: 0.57-0.89x), but M 64 0.74-0.80
// / 0.79-0.99x against 0.80-0.89 / 0.80-1.02x on the 3xTF32 swapped split-K rows: the 64-row instance's MMA work,
// not W's bytes, sets its time (242 us at 64 x 16384 x 4096, where 32 rows take 142).
inline constexpr int kNarrow3xTf32AutoMaxRows = 48;
inline bool narrow_3xtf32_automatic(const GemmShape& shape) { return shape.m <= kNarrow3xTf32AutoMaxRows; }
// The 16-bit (bf16, f16) entries, M 1-4, B MN-major (256 columns a CTA: 32 lanes x 8): the same kernel on 16-bit
// operands (fp32 multiply-adds, C in its type), N a multiple of 8.
const GemmKernel& narrow_16_bit_gemm_kernel(DType dtype);

// Whether the automatic choice may run the 16-bit entries on `shape` (the rule above kNarrow16AutoMaxRows).
inline bool narrow_16_bit_automatic(const GemmShape& shape) {
  return shape.m == 1 || (shape.m <= kNarrow16AutoMaxRows && shape.n >= shape.k);
}

}  // namespace attnkit::cuda::gemm
