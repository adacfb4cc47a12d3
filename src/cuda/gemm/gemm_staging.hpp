// Staging: how a problem whose operands a tensor-core kernel cannot address directly still runs on it.
// An operand that misses the kernel's layout rule (TMA: a 16-byte aligned base address, leading dimension
// and batch stride; the SM80 kernels additionally extents along the contiguous dimension that are
// multiples of 16 bytes) is copied into a dense aligned buffer in the workspace, the kernel runs on the
// copies, and a staged C is copied back (and copied in first when beta != 0). Only the operands that need
// it are copied.
//
// Two kinds:
// - TMA (Hopper rows): the leading dimensions and base addresses change; M and K stay, since TMA bounds
//   every load box by the tensor's extents (zero fill beyond them), so the copy's padding columns are never
//   read and are left unwritten. N is the exception: the Hopper epilogue needs C's rows to be a multiple of
//   16 bytes long (gemm_sm90.cuh), so an N that is not is rounded up (`pad_n`): C is staged with the rounded
//   N (its extra columns computed and dropped on the copy back) and B is staged with the rounded N too, its
//   extra columns (MN-major B) or rows (K-major B) zero, so the kernel reads no element outside B's view.
// - padded extents (SM80 rows): the contiguous extents are rounded up to the access width and the padding is
//   zero-filled; K grows for both operands (zeros add nothing), M or N grow only where an operand is MN-major,
//   and then C is staged too (its extra rows / columns are computed and dropped).
//
// The copies are one launch before the kernel (every staged input operand, C too when beta != 0) and one
// after it (C back). Cost (16-bit types, the 4095 x 4097 x 4099 row-major problem, all three operands
// unaligned): A and B are read and written once more (2 x 2 x 33.6 MB) and C written twice and read once
// (3 x 33.6 MB): about 235 MB of extra traffic, some 70 us at 3.3 TB/s, against 137.5 GFLOP (about 200 us
// at 700 TF/s): about 1.35x the time of an aligned problem of that size. With only A misaligned (4096 x
// 4096 x 4100, K-major A), 67 MB: about 10 %. An N that is not a multiple of 8 stages B and C; packed
// operands of such an N (row-major C, MN-major B) have leading dimensions of N, which miss TMA's rule and
// are staged anyway, so pad_n adds no copy there. It does add one where B is K-major and otherwise aligned
// (x @ W^T with an odd number of weight rows): a read and a write of B per call, about twice the kernel's
// own traffic when M is small (decode-like calls, where B is the large operand).
//
// A third kind changes B's majorness: TF32 wgmma reads K-major shared memory only, so a TF32 Hopper row for an
// MN-major B (x @ W) moves the weight through registers, and its tiles run at 0.84-0.89x cuBLAS where the same
// rows with B K-major run at 0.98-1.00x (docs/perf.md). `transpose_b` stages B K-major (a tiled transpose into the
// workspace, N rounded as pad_n says, its extra rows zero) for a K-major row: 8 K N bytes more traffic, paid where
// the problem reuses B over enough rows of A (gemm_transposed_b_pays).
#pragma once
#include <cstdint>
#include <memory>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_shape.hpp"

namespace attnkit::cuda::gemm {

struct GemmStaging {
  bool a = false, b = false, c = false;
  bool pad_extents = false;  // SM80: contiguous extents padded with zeros (else TMA: strides only)
  bool pad_n = false;        // TMA: N rounded up to 16 bytes (B and C staged; B's extra columns / rows zero)
  bool transpose_b = false;  // TMA: an MN-major B staged K-major (b is set too)
  bool any() const { return a || b || c; }
};

// The operands of `shape` that miss TMA's rule (see above), for a Hopper row, with pad_n when N is not a
// multiple of 16 bytes.
GemmStaging tma_staging(const GemmShape& shape);

// tma_staging for a K-major row on an MN-major B: B transposed into the workspace, the other operands as
// tma_staging has them.
GemmStaging transposed_b_staging(const GemmShape& shape);

// Whether an fp32 problem with B MN-major and A K-major reuses B over enough rows of A that transposing B
// (transposed_b_staging) costs less than the register path's loss on the TF32 rows: M (times the batch when B
// is shared) of at least kTransposedBMinRows. The transposition costs about 4 R / (W M) of the GEMM's time (R the
// TF32 rate, W the copy bandwidth): 12 % at M 4096 on an H200, where the two ran level (per call 0.88-0.99x cuBLAS
// either way, docs/perf.md), 6 % at 8192, where the transposed B ran 4-10 % faster.
inline constexpr int64_t kTransposedBMinRows = 8192;
bool gemm_transposed_b_pays(const GemmShape& shape);

// Whether N (C's contiguous extent) is a multiple of 16 bytes, as the Hopper epilogue needs.
bool gemm_n_aligned(const GemmShape& shape);

// The operands that miss the SM80 rule, with the padded extents.
GemmStaging padded_staging(const GemmShape& shape);

// Whether each operand of `shape` meets TMA's stride rule (N's length is gemm_n_aligned's question).
bool tma_addressable(const GemmShape& shape);

// The shape the kernel computes when `staging` applies to `shape`: staged operands dense (leading
// dimension rounded up to 16 bytes, batch strides the packed matrix, 0 kept for a broadcast batch), extents
// padded where the staging says so (pad_extents, pad_n), data pointers of staged operands at 16-byte aligned
// placeholders.
GemmShape staged_shape(const GemmShape& shape, const GemmStaging& staging);

// A runner that stages the operands of `shape` (the unstaged problem) into its workspace, runs `inner` (made
// for staged_shape(shape, staging)) on the copies and copies C back.
std::unique_ptr<GemmRunner> make_staged_runner(const GemmShape& shape, const GemmStaging& staging,
                                               std::unique_ptr<GemmRunner> inner, const GemmDevice& device);

}  // namespace attnkit::cuda::gemm
