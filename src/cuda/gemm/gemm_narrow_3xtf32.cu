// The narrow fp32 GEMM on tensor cores for x @ W^T (gemm_narrow.hpp): M 17-64 rows of x against a K-contiguous W
// [N, K], 3xTF32 mma.sync with fp32-level error, for the rows where the SIMT K-major kernel's fp32 multiply-adds,
// not W's bytes, set its time.
//
// Algorithm. C^T = W x^T: W is the MMA's A operand (m16: 16 columns of C), x its B operand (n8: 8 rows of x),
// m16n8k8 TF32 with fp32 accumulators. Each value v is split as big + small (big = tf32(v) rounded to nearest, small
// = tf32(v - big)); a product is small_w big_x + big_w small_x + big_w big_x (small x small, below 2^-22 of the
// product, is dropped). A warp owns 16 columns of C and the kRows (32) rows of x of its row pass, as 4 n-tiles, over
// its CTA's slice of K; a CTA is 8 warps (128 columns). Grid: column blocks x row passes (blockIdx.x = column block x
// passes + pass: M 33-64 runs two, adjacent so that the second reads W from L2) x K slices (blockIdx.y), whose fp32
// partial sums the split-K sum (gemm_split_k.hpp) adds in slice order.
//
// K order inside a 32-value block: lane (g, t) (g = lane / 4, t = lane % 4) loads rows g and g + 8 of the warp's W
// tile at offsets 8t .. 8t + 7 (two 16-byte loads a row: a warp reads 8 rows x 128 contiguous bytes twice), and MMA
// step s (0..3) takes offsets 8t + 2s and 8t + 2s + 1 as its K slots t and t + 4: a permutation of K applied to both
// operands, which a sum over K does not see. x's chunk of 64 values of K is staged in shared memory already split
// (a big and a small plane, [row][k] with rows of 66 words: in a half warp the lanes' 8-byte reads at row g, word 8t +
// 2s take distinct bank pairs), double-buffered: the next chunk is loaded into registers while the current one is
// multiplied and is split and stored after it, one barrier a chunk. W streams with 16-byte evict-first loads, each
// 32-value block loaded a block before its MMAs (two register sets in rotation, one chunk of two blocks an
// iteration). Per block a warp issues 4 steps x 4 n-tiles x 3 MMAs, each step's three of an n-tile into a zeroed
// accumulator that is then added to the running sums in fp32 (the tensor cores' own additions truncate, a bias that
// grows with their count: gemm_sm90_3xtf32_mainloop.cuh).
//
// Counts (24 x 4096 x 4096, M padded to 32; estimates, not measurements): W's 64 MiB stream once (about 16 us at
// 4.2 TB/s); 3 x 32 x 4096 x 4096 multiply-adds are 1.6 M MMAs of 2 048 FLOP; shared memory gives a warp's MMAs of a
// block 32 8-byte reads a lane.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/gemm/gemm_dependents.cuh"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_split_k.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpColumns = 16;                    // an m16 tile of W
constexpr int kCtaColumns = kWarps * kWarpColumns;  // 128
constexpr int kRows = 32;                           // rows of x at most: 4 n8 tiles
constexpr int kTiles = kRows / 8;
constexpr int kBlock = 32;                        // values of K per MMA block (4 steps of 8)
constexpr int kBlocksPerChunk = 2;                // the W register sets in rotation
constexpr int kChunk = kBlock * kBlocksPerChunk;  // values of K per staged chunk of x
constexpr int kRowWords = kChunk + 2;             // a staged row's words (bank pairs, above)
constexpr int kPlaneWords = kRows * kRowWords;
constexpr int kBufferWords = 2 * kPlaneWords;                // big and small planes
constexpr int kSharedBytes = 2 * kBufferWords * 4;           // two buffers: 33 792 bytes
constexpr int kStagedPerThread = kRows * kChunk / kThreads;  // 8
static_assert(kRows * kChunk % kThreads == 0, "whole staged values a thread");

struct Params {
  int64_t m, n, k;
  int64_t a_row, a_col, b_col, c_row;  // W's element (k, n) at n * b_col + k
  int64_t slice;                       // values of K per slice (a multiple of 4; the last may be shorter)
  int64_t passes;                      // row passes of kRows
  const float* a;
  const float* b;
  float* c;
  float* partials;  // slices x M x N, or null when K is one slice
  float alpha, beta;
};

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(x));
  return bits;
}

__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}

// d += a b, m16n8k8, TF32 in, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A lane's part of one 32-value block of its warp's W tile: rows g and g + 8, offsets 8t .. 8t + 7.
struct WBlock {
  float4 lo[2];  // row g
  float4 hi[2];  // row g + 8
};

__device__ __forceinline__ float4 load_w(const Params& p, int64_t column, int64_t k, int64_t k_end) {
  if (column >= p.n || k >= k_end) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  return __ldcs(reinterpret_cast<const float4*>(p.b + column * p.b_col + k));
}

// Block `kb`'s values of the lane's W rows (zeros past N and past the slice: k_end and kb + 8t + 4 are multiples of 4,
// so a vector is wholly in or out).
__device__ __forceinline__ void load_w_block(const Params& p, WBlock& w, int64_t column_g, int64_t kb, int t,
                                             int64_t k_end) {
  const int64_t k = kb + 8 * t;
  w.lo[0] = load_w(p, column_g, k, k_end);
  w.lo[1] = load_w(p, column_g, k + 4, k_end);
  w.hi[0] = load_w(p, column_g + 8, k, k_end);
  w.hi[1] = load_w(p, column_g + 8, k + 4, k_end);
}

__device__ __forceinline__ float element(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// acc += W block x the staged x block at word `word0` of `buffer` (the block's first value of K in the chunk), for
// the n-tiles below `tiles` (those holding rows of x; the CTA's uniform count). Each step's three MMAs of an n-tile go
// into a zeroed accumulator that is then added to acc in fp32.
__device__ __forceinline__ void multiply_block(float (&acc)[kTiles][4], const WBlock& w, const float* buffer, int word0,
                                               int tiles, int g, int t) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // Step s's K slots t and t + 4 are offsets 8t + 2s and 8t + 2s + 1: elements 2s % 4 and 2s % 4 + 1 of vector s / 2.
    uint32_t a_big[4], a_small[4];
    split_tf32(element(w.lo[s / 2], 2 * (s % 2)), a_big[0], a_small[0]);
    split_tf32(element(w.hi[s / 2], 2 * (s % 2)), a_big[1], a_small[1]);
    split_tf32(element(w.lo[s / 2], 2 * (s % 2) + 1), a_big[2], a_small[2]);
    split_tf32(element(w.hi[s / 2], 2 * (s % 2) + 1), a_big[3], a_small[3]);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      if (j >= tiles) break;
      const int word = (8 * j + g) * kRowWords + word0 + 8 * t + 2 * s;
      const float2 big = *reinterpret_cast<const float2*>(buffer + word);
      const float2 small = *reinterpret_cast<const float2*>(buffer + kPlaneWords + word);
      const uint32_t b_big[2] = {__float_as_uint(big.x), __float_as_uint(big.y)};
      const uint32_t b_small[2] = {__float_as_uint(small.x), __float_as_uint(small.y)};
      float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_tf32(step, a_small, b_big);
      mma_tf32(step, a_big, b_small);
      mma_tf32(step, a_big, b_big);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[j][i] += step[i];
    }
  }
}

// The thread's kStagedPerThread values of x's chunk at `chunk` (zeros past the pass's rows and the slice): column
// threadIdx % kChunk of rows threadIdx / kChunk + kRowsPerStaging i.
constexpr int kRowsPerStaging = kThreads / kChunk;
static_assert(kThreads % kChunk == 0, "a thread's staged values share their column");
__device__ __forceinline__ void load_x_chunk(const Params& p, const float* x_rows, int64_t rows, int64_t chunk,
                                             int64_t k_end, float (&staged)[kStagedPerThread]) {
  const int r0 = static_cast<int>(threadIdx.x) / kChunk;
  const int64_t k = chunk + static_cast<int>(threadIdx.x) % kChunk;
  const float* source = x_rows + r0 * p.a_row + k * p.a_col;
  const int64_t row_step = kRowsPerStaging * p.a_row;
#pragma unroll
  for (int i = 0; i < kStagedPerThread; ++i) {
    staged[i] = k < k_end && r0 + kRowsPerStaging * i < rows ? source[i * row_step] : 0.0f;
  }
}

// Those values split into the buffer's big and small planes.
__device__ __forceinline__ void store_x_chunk(const float (&staged)[kStagedPerThread], float* buffer) {
  const int word0 = static_cast<int>(threadIdx.x) / kChunk * kRowWords + static_cast<int>(threadIdx.x) % kChunk;
#pragma unroll
  for (int i = 0; i < kStagedPerThread; ++i) {
    const int word = word0 + kRowsPerStaging * kRowWords * i;
    uint32_t big, small;
    split_tf32(staged[i], big, small);
    buffer[word] = __uint_as_float(big);
    buffer[kPlaneWords + word] = __uint_as_float(small);
  }
}

__global__ void __launch_bounds__(kThreads, 2) narrow_3xtf32_k_major_kernel(const Params p) {
  extern __shared__ __align__(16) float buffers[];  // [2][big, small][kRows][kRowWords]
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % p.passes * kRows;
  const int64_t rows = p.m - row0 < kRows ? p.m - row0 : kRows;
  const int tiles = static_cast<int>((rows + 7) / 8);  // n-tiles holding rows of x (M 17-24: 3 of 4)
  const float* x_rows = p.a + row0 * p.a_row;
  const int64_t column_block = static_cast<int64_t>(blockIdx.x) / p.passes;
  const int64_t column_g = column_block * kCtaColumns + warp * kWarpColumns + g;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  float staged[kStagedPerThread];
  if (k_begin < k_end) {
    load_x_chunk(p, x_rows, rows, k_begin, k_end, staged);
    store_x_chunk(staged, buffers);
  }
  WBlock w0, w1;
  load_w_block(p, w0, column_g, k_begin, t, k_end);
  load_w_block(p, w1, column_g, k_begin + kBlock, t, k_end);
  __syncthreads();
  int buffer = 0;
#pragma unroll 1
  for (int64_t chunk = k_begin; chunk < k_end; chunk += kChunk, buffer ^= 1) {
    const bool more = chunk + kChunk < k_end;
    if (more) load_x_chunk(p, x_rows, rows, chunk + kChunk, k_end, staged);
    const float* current = buffers + buffer * kBufferWords;
    // Each set's block, then the same set's block of the next chunk: a block stays in flight while one multiplies.
    multiply_block(acc, w0, current, 0, tiles, g, t);
    load_w_block(p, w0, column_g, chunk + kChunk, t, k_end);
    multiply_block(acc, w1, current, kBlock, tiles, g, t);
    load_w_block(p, w1, column_g, chunk + kChunk + kBlock, t, k_end);
    // The other buffer's readers finished before the previous chunk's barrier.
    if (more) store_x_chunk(staged, buffers + (buffer ^ 1) * kBufferWords);
    __syncthreads();
  }

  signal_dependents();
  // acc[j][i]: C row 8j + 2t + i % 2, column g + 8 (i / 2) of the warp's tile.
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = 8 * j + 2 * t + i % 2;
      const int64_t column = column_g + 8 * (i / 2);
      if (row >= rows || column >= p.n) continue;
      if (p.partials != nullptr) {
        p.partials[(static_cast<int64_t>(blockIdx.y) * p.m + row0 + row) * p.n + column] = acc[j][i];
      } else {
        float& out = p.c[(row0 + row) * p.c_row + column];
        out = p.beta != 0.0f ? fmaf(p.beta, out, p.alpha * acc[j][i]) : p.alpha * acc[j][i];
      }
    }
  }
}

int64_t column_blocks(const GemmShape& s) { return (s.n + kCtaColumns - 1) / kCtaColumns; }
int64_t row_passes(const GemmShape& s) { return (s.m + kRows - 1) / kRows; }

// K slices: gemm_narrow.hpp's rule for this kernel's column blocks.
int slices_of(const GemmShape& s, int multiprocessors) {
  return narrow_slices_for(column_blocks(s) * row_passes(s), s.k, multiprocessors);
}

class Narrow3xTf32Runner final : public GemmRunner {
 public:
  Narrow3xTf32Runner(const GemmShape& shape, const GemmDevice& device)
      : slices_(shape, slices_of(shape, device.multiprocessors), device.multiprocessors, device.capability >= 90) {}

  int64_t workspace_bytes() const override { return slices_.workspace_bytes(); }

  void run(const GemmShape& s, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    Params p{};
    p.m = s.m, p.n = s.n, p.k = s.k;
    p.a_row = s.a_row, p.a_col = s.a_col, p.b_col = s.b_col, p.c_row = s.c_row;
    const int slices = slices_.count();
    p.slice = ((s.k + slices - 1) / slices + 3) / 4 * 4;  // whole 16-byte vectors of W's rows in each slice
    p.a = static_cast<const float*>(s.a), p.b = static_cast<const float*>(s.b), p.c = static_cast<float*>(s.c);
    p.partials = slices_.partials(workspace);
    p.alpha = alpha, p.beta = beta;
    check_cuda(raise_dynamic_shared_memory_once(narrow_3xtf32_k_major_kernel, kSharedBytes),
               "cudaFuncSetAttribute(narrow_3xtf32_k_major_kernel)");
    p.passes = row_passes(s);
    const dim3 grid(static_cast<unsigned>(column_blocks(s) * p.passes), static_cast<unsigned>(slices));
    narrow_3xtf32_k_major_kernel<<<grid, kThreads, kSharedBytes, stream>>>(p);
    check_launch("narrow_3xtf32_k_major_kernel");
    slices_.sum(s, workspace, alpha, beta, stream);
  }

 private:
  SplitKSlices slices_;
};

std::unique_ptr<GemmRunner> make_runner(const GemmShape& shape, const GemmDevice& device) {
  return std::make_unique<Narrow3xTf32Runner>(shape, device);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Empty when the kernel runs `s` with M in [least, most], else why not.
std::string refusal_for_rows(const GemmShape& s, const GemmDevice& device, int64_t least, int64_t most) {
  if (s.dtype != DType::f32) return "float32 only";
  if (s.batch != 1) return "batch 1 only (a batch sharing B is folded into M before)";
  if (s.m < least || s.m > most || s.n < 1 || s.k < 1) {
    return "M from " + std::to_string(least) + " to " + std::to_string(most) + " rows, N and K at least 1";
  }
  if (!s.b_k_major()) return "B must be K-major (K contiguous: x @ W^T)";
  if (s.k % 4 != 0 || s.b_col % 4 != 0 || !aligned16(s.b)) {
    return "K and B's column stride must be multiples of 4 elements and B 16-byte aligned (16-byte loads along B's "
           "columns)";
  }
  if (s.n % 4 != 0 || s.c_row % 4 != 0 || !aligned16(s.c)) {
    return "N and C's row stride must be multiples of 4 elements and C 16-byte aligned (the slices' sum writes 4 "
           "elements at a time)";
  }
  const int64_t ctas = column_blocks(s) * row_passes(s) * slices_of(s, device.multiprocessors);
  if (ctas < std::max(device.multiprocessors, 1)) {
    return "its CTAs (" + std::to_string(kCtaColumns) + " columns x row passes of " + std::to_string(kRows) +
           " x K slices of at least " + std::to_string(kNarrowMinSliceK) + " values) would not cover every SM";
  }
  return "";
}

std::string refusal_up_to_32(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, kNarrow3xTf32MinRows, kRows);
}

std::string refusal_33_to_64(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, kRows + 1, kNarrowExactMaxRows);
}

GemmKernel entry(const char* name, int tile_m, bool exact_only,
                 std::string (*refusal)(const GemmShape&, const GemmDevice&)) {
  GemmKernel k;
  k.name = name;
  k.tier = GemmTier::narrow;
  k.dtype = DType::f32;
  k.math = GemmMath::fast_f32;
  k.a_k_major = -1;
  k.b_k_major = 1;
  k.architecture = 80;
  k.tile_m = tile_m;
  k.tile_n = kCtaColumns;
  k.exact_only = exact_only;
  k.refusal = refusal;
  k.make_runner = &make_runner;
  return k;
}

}  // namespace

const GemmKernel& narrow_3xtf32_k_major_gemm_kernel() {
  static const GemmKernel kernel = entry("narrow_f32_bk_m32x128_3xtf32", kRows, false, &refusal_up_to_32);
  return kernel;
}

const GemmKernel& narrow_3xtf32_k_major_two_pass_gemm_kernel() {
  static const GemmKernel kernel =
      entry("narrow_f32_bk_m64x128_3xtf32_exact", kNarrowExactMaxRows, true, &refusal_33_to_64);
  return kernel;
}

}  // namespace attnkit::cuda::gemm
