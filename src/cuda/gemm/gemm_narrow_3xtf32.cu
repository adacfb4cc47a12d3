// The narrow fp32 GEMM on tensor cores (gemm_narrow.hpp): M 17-64 rows of x against a weight W, K-contiguous (x @
// W^T, W [N, K]) or N-contiguous (x @ W, W [K, N]), 3xTF32 mma.sync with fp32-level error, for the rows where the SIMT
// narrow kernel's fp32 multiply-adds, not W's bytes, set its time.
//
// Algorithm. C^T = W x^T: W is the MMA's A operand (m16: 16 columns of C), x its B operand (n8: 8 rows of x),
// m16n8k8 TF32 with fp32 accumulators. Each value v is split as big + small (big = tf32(v) rounded to nearest, small
// = tf32(v - big)); a product is small_w big_x + big_w small_x + big_w big_x (small x small, below 2^-22 of the
// product, is dropped). A warp owns 16 columns of C and the kRows (32 or 64: 4 or 8 n-tiles) rows of x over its CTA's
// slice of K; a CTA is 8 warps (128 columns). Grid: column blocks (blockIdx.x) x K slices (blockIdx.y), whose fp32
// partial sums the split-K sum (gemm_split_k.hpp) adds in slice order.
//
// K order inside a 32-value block: lane (g, t) (g = lane / 4, t = lane % 4) holds offsets 8t .. 8t + 7 of its W
// values, and MMA step s (0..3) takes offsets 8t + 2s and 8t + 2s + 1 as its K slots t and t + 4: a permutation of K
// applied to both operands, which a sum over K does not see. The MMA's rows g and g + 8 are the warp's columns g and
// g + 8 when W is K-major (two 16-byte loads a row: a warp reads 8 rows x 128 contiguous bytes twice), and columns 2g
// and 2g + 1 when W is N-major (an 8-byte load per value of K: 8 lanes read a row's 64 contiguous bytes), a
// permutation of C's columns undone where C is written. x's chunk of 64 values of K is staged in shared memory already
// split (a big and a small plane, [row][k] with rows of 66 words: in a half warp the lanes' 8-byte reads at row g, word
// 8t + 2s take distinct bank pairs), double-buffered: the next chunk is loaded into registers while the current one is
// multiplied and is split and stored after it, one barrier a chunk. W streams with evict-first loads, each 32-value
// block loaded a block before its MMAs (two register sets in rotation, one chunk of two blocks an iteration). Per
// block a warp issues 4 steps x n-tiles x 3 MMAs, each step's three of an n-tile into a zeroed accumulator that is
// then added to the running sums in fp32 (the tensor cores' own additions truncate, a bias that grows with their
// count: gemm_sm90_3xtf32_mainloop.cuh).
//
// Counts (24 x 4096 x 4096, M padded to 32; estimates, not measurements): W's 64 MiB stream once (about 16 us at
// 4.2 TB/s); 3 x 32 x 4096 x 4096 multiply-adds are 1.6 M MMAs of 2 048 FLOP; shared memory gives a warp's MMAs of a
// block 32 8-byte reads a lane per 4 n-tiles.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/common/programmatic_launch.cuh"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_split_k.hpp"
#include "cuda/gemm/gemm_tf32_split.cuh"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpColumns = 16;                    // an m16 tile of W
constexpr int kCtaColumns = kWarps * kWarpColumns;  // 128
constexpr int kBlock = 32;                          // values of K per MMA block (4 steps of 8)
constexpr int kBlocksPerChunk = 2;                  // the W register sets in rotation
constexpr int kChunk = kBlock * kBlocksPerChunk;    // values of K per staged chunk of x
constexpr int kRowWords = kChunk + 2;               // a staged row's words (bank pairs, above)

// The instance's rows of x (32 or 64) and their staging: two buffers of a big and a small plane, 33 792 or 67 584
// bytes.
template <int Rows>
struct RowTile {
  static constexpr int kRows = Rows;
  static constexpr int kTiles = kRows / 8;
  static constexpr int kPlaneWords = kRows * kRowWords;
  static constexpr int kBufferWords = 2 * kPlaneWords;
  static constexpr int kSharedBytes = 2 * kBufferWords * 4;
  static constexpr int kStagedPerThread = kRows * kChunk / kThreads;
  static_assert(kRows * kChunk % kThreads == 0, "whole staged values a thread");
};

struct Params {
  int64_t m, n, k;
  int64_t a_row, a_col;  // x's element (i, k) at i * a_row + k * a_col
  int64_t b_stride;      // W's element (k, n) at n * b_stride + k (K-major) or k * b_stride + n (N-major)
  int64_t c_row;
  int64_t slice;  // values of K per slice (a multiple of 4; the last may be shorter)
  const float* a;
  const float* b;
  float* c;
  float* partials;  // slices x M x N, or null when K is one slice
  float alpha, beta;
};

// d += a b, m16n8k8, TF32 in, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ float element(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A lane's part of one 32-value block of its warp's W tile (offsets 8t .. 8t + 7 of the block), by W's majorness.
// `column` is the lane's first column of C: the warp's g-th when W is K-major (and g + 8), its 2g-th when N-major (and
// 2g + 1); k_end and the block's offsets 8t, 8t + 4 are multiples of 4, so a K-major vector is wholly in or out.
template <bool WKMajor>
struct WBlock;

template <>
struct WBlock<true> {
  float4 lo[2];  // column g
  float4 hi[2];  // column g + 8
  static __device__ __forceinline__ int64_t lane_column(int64_t warp_first, int g) { return warp_first + g; }
  // C's column of accumulator value i (0..3) of the lane: the MMA row g or g + 8.
  static __device__ __forceinline__ int64_t value_column(int64_t column, int i) { return column + 8 * (i / 2); }

  __device__ __forceinline__ void load(const Params& p, int64_t column, int64_t kb, int t, int64_t k_end) {
    const int64_t k = kb + 8 * t;
    lo[0] = vector(p, column, k, k_end);
    lo[1] = vector(p, column, k + 4, k_end);
    hi[0] = vector(p, column + 8, k, k_end);
    hi[1] = vector(p, column + 8, k + 4, k_end);
  }
  // Step s's A fragment values: rows g, g + 8 at slot t (offset 8t + 2s), then at slot t + 4 (8t + 2s + 1).
  __device__ __forceinline__ void step_values(int s, float (&v)[4]) const {
    v[0] = element(lo[s / 2], 2 * (s % 2));
    v[1] = element(hi[s / 2], 2 * (s % 2));
    v[2] = element(lo[s / 2], 2 * (s % 2) + 1);
    v[3] = element(hi[s / 2], 2 * (s % 2) + 1);
  }

 private:
  static __device__ __forceinline__ float4 vector(const Params& p, int64_t column, int64_t k, int64_t k_end) {
    if (column >= p.n || k >= k_end) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return __ldcs(reinterpret_cast<const float4*>(p.b + column * p.b_stride + k));
  }
};

template <>
struct WBlock<false> {
  float2 at[8];  // offset 8t + i: columns 2g and 2g + 1
  static __device__ __forceinline__ int64_t lane_column(int64_t warp_first, int g) { return warp_first + 2 * g; }
  static __device__ __forceinline__ int64_t value_column(int64_t column, int i) { return column + i / 2; }

  __device__ __forceinline__ void load(const Params& p, int64_t column, int64_t kb, int t, int64_t k_end) {
    const int64_t k = kb + 8 * t;
    const bool in = column < p.n;  // N is even: the pair is wholly in or out
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      at[i] = in && k + i < k_end ? __ldcs(reinterpret_cast<const float2*>(p.b + (k + i) * p.b_stride + column))
                                  : make_float2(0.0f, 0.0f);
    }
  }
  __device__ __forceinline__ void step_values(int s, float (&v)[4]) const {
    v[0] = at[2 * s].x;
    v[1] = at[2 * s].y;
    v[2] = at[2 * s + 1].x;
    v[3] = at[2 * s + 1].y;
  }
};

// acc += W block x the staged x block at word `word0` of `buffer` (the block's first value of K in the chunk), for
// the n-tiles below `tiles` (those holding rows of x; the CTA's uniform count). Each step's three MMAs of an n-tile go
// into a zeroed accumulator that is then added to acc in fp32.
template <class Tile, bool WKMajor>
__device__ __forceinline__ void multiply_block(float (&acc)[Tile::kTiles][4], const WBlock<WKMajor>& w,
                                               const float* buffer, int word0, int tiles, int g, int t) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    float v[4];
    w.step_values(s, v);
    uint32_t a_big[4], a_small[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float big, small;
      split_tf32(v[i], big, small);
      a_big[i] = __float_as_uint(big);
      a_small[i] = __float_as_uint(small);
    }
#pragma unroll
    for (int j = 0; j < Tile::kTiles; ++j) {
      if (j >= tiles) break;
      const int word = (8 * j + g) * kRowWords + word0 + 8 * t + 2 * s;
      const float2 big = *reinterpret_cast<const float2*>(buffer + word);
      const float2 small = *reinterpret_cast<const float2*>(buffer + Tile::kPlaneWords + word);
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

// The thread's kStagedPerThread values of x's chunk at `chunk` (zeros past M and the slice): column threadIdx % kChunk
// of rows threadIdx / kChunk + kRowsPerStaging i.
constexpr int kRowsPerStaging = kThreads / kChunk;
static_assert(kThreads % kChunk == 0, "a thread's staged values share their column");
template <class Tile>
__device__ __forceinline__ void load_x_chunk(const Params& p, int64_t chunk, int64_t k_end,
                                             float (&staged)[Tile::kStagedPerThread]) {
  const int r0 = static_cast<int>(threadIdx.x) / kChunk;
  const int64_t k = chunk + static_cast<int>(threadIdx.x) % kChunk;
  const float* source = p.a + r0 * p.a_row + k * p.a_col;
  const int64_t row_step = kRowsPerStaging * p.a_row;
#pragma unroll
  for (int i = 0; i < Tile::kStagedPerThread; ++i) {
    staged[i] = k < k_end && r0 + kRowsPerStaging * i < p.m ? source[i * row_step] : 0.0f;
  }
}

// Those values split into the buffer's big and small planes.
template <class Tile>
__device__ __forceinline__ void store_x_chunk(const float (&staged)[Tile::kStagedPerThread], float* buffer) {
  const int word0 = static_cast<int>(threadIdx.x) / kChunk * kRowWords + static_cast<int>(threadIdx.x) % kChunk;
#pragma unroll
  for (int i = 0; i < Tile::kStagedPerThread; ++i) {
    const int word = word0 + kRowsPerStaging * kRowWords * i;
    float big, small;
    split_tf32(staged[i], big, small);
    buffer[word] = big;
    buffer[Tile::kPlaneWords + word] = small;
  }
}

template <int Rows, bool WKMajor>
__global__ void __launch_bounds__(kThreads, 2) narrow_3xtf32_kernel(const Params p) {
  using Tile = RowTile<Rows>;
  using W = WBlock<WKMajor>;
  extern __shared__ __align__(16) float buffers[];  // [2][big, small][kRows][kRowWords]
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = static_cast<int>((p.m + 7) / 8);  // n-tiles holding rows of x (M 17-24: 3 of 4)
  const int64_t column = W::lane_column(static_cast<int64_t>(blockIdx.x) * kCtaColumns + warp * kWarpColumns, g);
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;

  float acc[Tile::kTiles][4];
#pragma unroll
  for (int j = 0; j < Tile::kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  }
  float staged[Tile::kStagedPerThread];
  if (k_begin < k_end) {
    load_x_chunk<Tile>(p, k_begin, k_end, staged);
    store_x_chunk<Tile>(staged, buffers);
  }
  W w0, w1;
  w0.load(p, column, k_begin, t, k_end);
  w1.load(p, column, k_begin + kBlock, t, k_end);
  __syncthreads();
  int buffer = 0;
#pragma unroll 1
  for (int64_t chunk = k_begin; chunk < k_end; chunk += kChunk, buffer ^= 1) {
    const bool more = chunk + kChunk < k_end;
    if (more) load_x_chunk<Tile>(p, chunk + kChunk, k_end, staged);
    const float* current = buffers + buffer * Tile::kBufferWords;
    // Each set's block, then the same set's block of the next chunk: a block stays in flight while one multiplies.
    multiply_block<Tile>(acc, w0, current, 0, tiles, g, t);
    w0.load(p, column, chunk + kChunk, t, k_end);
    multiply_block<Tile>(acc, w1, current, kBlock, tiles, g, t);
    w1.load(p, column, chunk + kChunk + kBlock, t, k_end);
    // The other buffer's readers finished before the previous chunk's barrier.
    if (more) store_x_chunk<Tile>(staged, buffers + (buffer ^ 1) * Tile::kBufferWords);
    __syncthreads();
  }

  signal_dependents();
  // acc[j][i]: C row 8j + 2t + i % 2, column W::value_column(column, i).
#pragma unroll
  for (int j = 0; j < Tile::kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = 8 * j + 2 * t + i % 2;
      const int64_t c_column = W::value_column(column, i);
      if (row >= p.m || c_column >= p.n) continue;
      if (p.partials != nullptr) {
        p.partials[(static_cast<int64_t>(blockIdx.y) * p.m + row) * p.n + c_column] = acc[j][i];
      } else {
        float& out = p.c[row * p.c_row + c_column];
        out = p.beta != 0.0f ? fmaf(p.beta, out, p.alpha * acc[j][i]) : p.alpha * acc[j][i];
      }
    }
  }
}

int64_t column_blocks(const GemmShape& s) { return (s.n + kCtaColumns - 1) / kCtaColumns; }

// K slices: gemm_narrow.hpp's rule for this kernel's column blocks.
int slices_of(const GemmShape& s, int multiprocessors) {
  return narrow_slices_for(column_blocks(s), s.k, multiprocessors);
}

template <int Rows, bool WKMajor>
class Narrow3xTf32Runner final : public GemmRunner {
 public:
  Narrow3xTf32Runner(const GemmShape& shape, const GemmDevice& device)
      : slices_(shape, slices_of(shape, device.multiprocessors), device.multiprocessors, device.capability >= 90) {}

  int64_t workspace_bytes() const override { return slices_.workspace_bytes(); }

  void run(const GemmShape& s, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    Params p{};
    p.m = s.m, p.n = s.n, p.k = s.k;
    p.a_row = s.a_row, p.a_col = s.a_col, p.c_row = s.c_row;
    p.b_stride = WKMajor ? s.b_col : s.b_row;
    const int slices = slices_.count();
    p.slice = ((s.k + slices - 1) / slices + 3) / 4 * 4;  // whole 16-byte vectors of W's rows in each slice
    p.a = static_cast<const float*>(s.a), p.b = static_cast<const float*>(s.b), p.c = static_cast<float*>(s.c);
    p.partials = slices_.partials(workspace);
    p.alpha = alpha, p.beta = beta;
    constexpr int kSharedBytes = RowTile<Rows>::kSharedBytes;
    check_cuda(raise_dynamic_shared_memory_once(narrow_3xtf32_kernel<Rows, WKMajor>, kSharedBytes),
               "cudaFuncSetAttribute(narrow_3xtf32_kernel)");
    const dim3 grid(static_cast<unsigned>(column_blocks(s)), static_cast<unsigned>(slices));
    narrow_3xtf32_kernel<Rows, WKMajor><<<grid, kThreads, kSharedBytes, stream>>>(p);
    check_launch("narrow_3xtf32_kernel");
    slices_.sum(s, workspace, alpha, beta, stream);
  }

 private:
  SplitKSlices slices_;
};

template <int Rows, bool WKMajor>
std::unique_ptr<GemmRunner> make_runner(const GemmShape& shape, const GemmDevice& device) {
  return std::make_unique<Narrow3xTf32Runner<Rows, WKMajor>>(shape, device);
}

// Empty when the instance of `Rows` rows and W's majorness runs `s`, else why not: the narrow kernels' operand rule
// (fp32: K-major W with K and its column stride multiples of 4, or N-major W with its row stride a multiple of 4;
// 16-byte aligned W and C, N and C's row stride multiples of 4), and its CTAs covering the SMs.
template <int Rows, bool WKMajor>
std::string refusal(const GemmShape& s, const GemmDevice& device) {
  constexpr int64_t least = Rows == 32 ? kNarrow3xTf32MinRows : 33;
  if (std::string why = narrow_operand_refusal(s, DType::f32, WKMajor, least, Rows); !why.empty()) return why;
  const int64_t ctas = column_blocks(s) * slices_of(s, device.multiprocessors);
  if (ctas < std::max(device.multiprocessors, 1)) {
    return "its CTAs (" + std::to_string(kCtaColumns) + " columns x K slices of at least " +
           std::to_string(kNarrowMinSliceK) + " values) would not cover every SM";
  }
  return "";
}

template <int Rows, bool WKMajor>
GemmKernel entry(const char* name) {
  GemmKernel k;
  k.name = name;
  k.tier = GemmTier::narrow;
  k.dtype = DType::f32;
  k.math = GemmMath::fast_f32;
  k.a_k_major = -1;
  k.b_k_major = WKMajor ? 1 : 0;
  k.architecture = 80;
  k.tile_m = Rows;
  k.tile_n = kCtaColumns;
  k.exact_only = false;
  k.refusal = &refusal<Rows, WKMajor>;
  k.make_runner = &make_runner<Rows, WKMajor>;
  return k;
}

}  // namespace

const GemmKernel& narrow_3xtf32_gemm_kernel(bool b_k_major, int rows) {
  static const GemmKernel kernels[2][2] = {
      {entry<32, false>("narrow_f32_bmn_m32x128_3xtf32"), entry<64, false>("narrow_f32_bmn_m64x128_3xtf32")},
      {entry<32, true>("narrow_f32_bk_m32x128_3xtf32"), entry<64, true>("narrow_f32_bk_m64x128_3xtf32")}};
  return kernels[b_k_major ? 1 : 0][rows > 32 ? 1 : 0];
}

}  // namespace attnkit::cuda::gemm
