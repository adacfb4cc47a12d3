// The narrow-M fp32 GEMM (gemm_narrow.hpp). Grid: column blocks x row blocks (blockIdx.x = column block x row
// blocks + row block) x the K slices (blockIdx.y); 256 threads a CTA. A CTA walks its K slice in chunks of 256 rows
// of K, A's chunk staged in shared memory (rows < M, zeros above M and past K). kRows (4, 16 or 32) bounds the rows a
// CTA computes at compile time so that the accumulators stay in registers (M <= 4: 4, M <= 16: 16, else 32); the
// 32-row instances (over 200 registers a thread) run one CTA per SM, the others two. M of 33-64 runs in two row
// blocks of 32, adjacent in the grid, so that the second reads B's columns from L2 while the first streams them.
// Each CTA writes alpha * sum + beta * C when K is one slice, else its slice's fp32 partial sums, which the split-K
// sum (gemm_split_k.hpp) adds in slice order into C.
// B MN-major (x @ W): 128 columns a CTA; A's chunk as [k][row]; each warp takes the chunk's rows w, w + 8, ... of B,
// loading 8 of them (16 bytes a lane: the warp reads 512 contiguous bytes of a row) before multiplying them into its
// lane's kRows x 4 accumulators, one broadcast shared-memory read of A's column per row of B; the 8 warps' sums are
// added in warp order in shared memory.
// B K-major (x @ W^T): narrow_gemm_k_major_kernel, below.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_split_k.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 256;  // rows of K staged per step
constexpr int kUnroll = 8;   // rows of B a warp loads before it multiplies them

struct NarrowParams {
  int64_t m, n, k;
  int64_t a_row, a_col, b_row, b_col, c_row;
  int64_t slice;   // rows of K per slice (the last may be shorter)
  int64_t passes;  // row blocks of kRows: blockIdx.x is column block x passes + row block
  const float* a;
  const float* b;
  float* c;
  float* partials;  // slices x M x N fp32, or null when K is one slice
  float alpha, beta;
};

template <int kRows>
__global__ void __launch_bounds__(kThreads, kRows <= 16 ? kNarrowCtasPerSm : 1)
    narrow_gemm_kernel(const NarrowParams p) {
  __shared__ __align__(16) float sa[kChunk][kRows];
  __shared__ __align__(16) float sums[kRows][kNarrowColumns];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t column_block = static_cast<int64_t>(blockIdx.x) / p.passes;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % p.passes * kRows;
  const int64_t rows = p.m - row0 < kRows ? p.m - row0 : kRows;
  const float* a_rows = p.a + row0 * p.a_row;
  const int64_t column = column_block * kNarrowColumns + lane * 4;
  const bool column_in = column < p.n;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;
  const float* b_column = p.b + column;

  float4 acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  for (int64_t chunk = k_begin; chunk < k_end; chunk += kChunk) {
    // A's chunk, row index fastest (consecutive shared-memory words).
    for (int e = static_cast<int>(threadIdx.x); e < kChunk * kRows; e += kThreads) {
      const int r = e % kRows, kk = e / kRows;
      const int64_t kg = chunk + kk;
      sa[kk][r] = r < rows && kg < k_end ? a_rows[r * p.a_row + kg * p.a_col] : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int base = warp; base < kChunk; base += kWarps * kUnroll) {
      float4 bv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t kg = chunk + base + u * kWarps;
        bv[u] = column_in && kg < k_end ? __ldcs(reinterpret_cast<const float4*>(b_column + kg * p.b_row))
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float* a_column = sa[base + u * kWarps];
#pragma unroll
        for (int r4 = 0; r4 < kRows; r4 += 4) {
          const float4 a4 = *reinterpret_cast<const float4*>(a_column + r4);
          const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            float4& s = acc[r4 + q];
            s.x = fmaf(av[q], bv[u].x, s.x);
            s.y = fmaf(av[q], bv[u].y, s.y);
            s.z = fmaf(av[q], bv[u].z, s.z);
            s.w = fmaf(av[q], bv[u].w, s.w);
          }
        }
      }
    }
    __syncthreads();
  }

  // The warps' sums, added in warp order.
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        auto* s = reinterpret_cast<float4*>(&sums[r][lane * 4]);
        if (w == 0) {
          *s = acc[r];
        } else {
          float4 v = *s;
          v.x += acc[r].x, v.y += acc[r].y, v.z += acc[r].z, v.w += acc[r].w;
          *s = v;
        }
      }
    }
    __syncthreads();
  }

  const int64_t first = column_block * kNarrowColumns;
  for (int e = static_cast<int>(threadIdx.x); e < kRows * (kNarrowColumns / 4); e += kThreads) {
    const int r = e / (kNarrowColumns / 4), j = e % (kNarrowColumns / 4) * 4;
    const int64_t col = first + j;
    if (r >= rows || col >= p.n) continue;
    const float4 v = *reinterpret_cast<const float4*>(&sums[r][j]);
    if (p.partials != nullptr) {
      *reinterpret_cast<float4*>(p.partials + (static_cast<int64_t>(blockIdx.y) * p.m + row0 + r) * p.n + col) = v;
    } else {
      auto* out = reinterpret_cast<float4*>(p.c + (row0 + r) * p.c_row + col);
      float4 result = make_float4(p.alpha * v.x, p.alpha * v.y, p.alpha * v.z, p.alpha * v.w);
      if (p.beta != 0.0f) {
        const float4 old = *out;
        result.x = fmaf(p.beta, old.x, result.x);
        result.y = fmaf(p.beta, old.y, result.y);
        result.z = fmaf(p.beta, old.z, result.z);
        result.w = fmaf(p.beta, old.w, result.w);
      }
      *out = result;
    }
  }
}

// B K-major (x @ W^T with a row-major W [N, K]): a warp owns 4 columns of C, its lanes 4 consecutive K each (the warp
// reads 512 contiguous bytes of each of the 4 rows of W per step of 128 along K), A's chunk staged as [row][k] and
// read as one 16-byte vector a row; each lane's kRows x 4 partial dot products are summed over the warp by an xor
// butterfly (every lane ends with the same sums, in the same order) and written by the lane of their index.
template <int kRows>
__global__ void __launch_bounds__(kThreads, kRows <= 16 ? kNarrowCtasPerSm : 1)
    narrow_gemm_k_major_kernel(const NarrowParams p) {
  constexpr int kColumnsPerWarp = kNarrowKMajorColumns / kWarps;
  constexpr int kStep = 32 * 4;
  __shared__ __align__(16) float sa[kRows][kChunk];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t column_block = static_cast<int64_t>(blockIdx.x) / p.passes;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % p.passes * kRows;
  const int64_t rows = p.m - row0 < kRows ? p.m - row0 : kRows;
  const float* a_rows = p.a + row0 * p.a_row;
  const int64_t column0 = column_block * kNarrowKMajorColumns + warp * kColumnsPerWarp;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;

  float acc[kColumnsPerWarp][kRows];
#pragma unroll
  for (int c = 0; c < kColumnsPerWarp; ++c) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = 0.0f;
  }

  for (int64_t chunk = k_begin; chunk < k_end; chunk += kChunk) {
    for (int e = static_cast<int>(threadIdx.x); e < kChunk * kRows; e += kThreads) {
      const int r = e / kChunk, kk = e % kChunk;
      const int64_t kg = chunk + kk;
      sa[r][kk] = r < rows && kg < k_end ? a_rows[r * p.a_row + kg * p.a_col] : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int step = 0; step < kChunk; step += kStep) {
      const int kk = step + lane * 4;
      const int64_t kg = chunk + kk;  // k_end and kg are multiples of 4: a vector is wholly in or out
      float4 w[kColumnsPerWarp];
#pragma unroll
      for (int c = 0; c < kColumnsPerWarp; ++c) {
        const int64_t n = column0 + c;
        w[c] = n < p.n && kg < k_end ? __ldcs(reinterpret_cast<const float4*>(p.b + n * p.b_col + kg))
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 a4 = *reinterpret_cast<const float4*>(&sa[r][kk]);
#pragma unroll
        for (int c = 0; c < kColumnsPerWarp; ++c) {
          float v = acc[c][r];
          v = fmaf(a4.x, w[c].x, v);
          v = fmaf(a4.y, w[c].y, v);
          v = fmaf(a4.z, w[c].z, v);
          acc[c][r] = fmaf(a4.w, w[c].w, v);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int c = 0; c < kColumnsPerWarp; ++c) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = acc[c][r];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      const int64_t n = column0 + c;
      if ((c * kRows + r) % 32 != lane || r >= rows || n >= p.n) continue;
      if (p.partials != nullptr) {
        p.partials[(static_cast<int64_t>(blockIdx.y) * p.m + row0 + r) * p.n + n] = v;
      } else {
        float& out = p.c[(row0 + r) * p.c_row + n];
        out = p.beta != 0.0f ? fmaf(p.beta, out, p.alpha * v) : p.alpha * v;
      }
    }
  }
}

// Columns of C per CTA: 128 with B MN-major (32 lanes x 4), 32 with B K-major (8 warps x 4).
int64_t columns_per_cta(const GemmShape& s) { return s.b_k_major() ? kNarrowKMajorColumns : kNarrowColumns; }

int64_t column_blocks(const GemmShape& s) { return (s.n + columns_per_cta(s) - 1) / columns_per_cta(s); }

// Row blocks of the 32-row instance (M <= 16 runs in one block of a smaller instance).
int64_t row_passes(const GemmShape& s) {
  return s.m <= kNarrowMaxRows ? 1 : (s.m + kNarrowMaxRows - 1) / kNarrowMaxRows;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

class NarrowRunner final : public GemmRunner {
 public:
  NarrowRunner(const GemmShape& shape, const GemmDevice& device)
      : multiprocessors_(std::max(device.multiprocessors, 1)),
        slices_(narrow_gemm_slices(shape, device.multiprocessors)) {
    if (slices_ > 1) partial_bytes_ = gemm_split_k_partial_bytes(shape, slices_);
  }

  int64_t workspace_bytes() const override { return partial_bytes_; }

  void run(const GemmShape& s, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    NarrowParams p{};
    p.m = s.m, p.n = s.n, p.k = s.k;
    p.a_row = s.a_row, p.a_col = s.a_col, p.b_row = s.b_row, p.b_col = s.b_col, p.c_row = s.c_row;
    p.slice = (s.k + slices_ - 1) / slices_;
    if (s.b_k_major()) p.slice = (p.slice + 3) / 4 * 4;  // whole 16-byte vectors of B's rows in each slice
    p.passes = row_passes(s);
    p.a = static_cast<const float*>(s.a);
    p.b = static_cast<const float*>(s.b);
    p.c = static_cast<float*>(s.c);
    p.partials = slices_ > 1 ? static_cast<float*>(workspace) : nullptr;
    p.alpha = alpha, p.beta = beta;
    const dim3 grid(static_cast<unsigned>(column_blocks(s) * p.passes), static_cast<unsigned>(slices_));
    if (s.b_k_major()) {
      if (s.m <= 4) {
        narrow_gemm_k_major_kernel<4><<<grid, kThreads, 0, stream>>>(p);
      } else if (s.m <= 16) {
        narrow_gemm_k_major_kernel<16><<<grid, kThreads, 0, stream>>>(p);
      } else {
        narrow_gemm_k_major_kernel<kNarrowMaxRows><<<grid, kThreads, 0, stream>>>(p);
      }
    } else if (s.m <= 4) {
      narrow_gemm_kernel<4><<<grid, kThreads, 0, stream>>>(p);
    } else if (s.m <= 16) {
      narrow_gemm_kernel<16><<<grid, kThreads, 0, stream>>>(p);
    } else {
      narrow_gemm_kernel<kNarrowMaxRows><<<grid, kThreads, 0, stream>>>(p);
    }
    check_launch("narrow_gemm_kernel");
    if (slices_ > 1) sum_split_k_slices(s, p.partials, slices_, alpha, beta, multiprocessors_, stream);
  }

 private:
  int multiprocessors_;
  int slices_;
  int64_t partial_bytes_ = 0;
};

std::unique_ptr<GemmRunner> make_narrow_runner(const GemmShape& shape, const GemmDevice& device) {
  return std::make_unique<NarrowRunner>(shape, device);
}

}  // namespace

int narrow_gemm_slices(const GemmShape& s, int multiprocessors) {
  const int64_t blocks = std::max<int64_t>(column_blocks(s) * row_passes(s), 1);
  const int64_t wanted = std::max<int64_t>(int64_t{kNarrowCtasPerSm} * std::max(multiprocessors, 1) / blocks, 1);
  const int64_t most = std::max<int64_t>(s.k / kNarrowMinSliceK, 1);
  return static_cast<int>(std::clamp<int64_t>(std::min(wanted, most), 1, kNarrowMaxSlices));
}

namespace {

std::string refusal_for_rows(const GemmShape& s, const GemmDevice& device, bool k_major, int64_t least, int64_t most) {
  if (s.dtype != DType::f32) return "fp32 only";
  if (s.batch != 1) return "batch 1 only (a batch sharing B is folded into M before)";
  if (s.m < least || s.m > most || s.n < 1 || s.k < 1) {
    return "M from " + std::to_string(least) + " to " + std::to_string(most) + " rows, N and K at least 1";
  }
  if (s.b_k_major() != k_major)
    return k_major ? "B must be K-major (K contiguous)" : "B must be MN-major (N contiguous)";
  if (s.n % 4 != 0 || s.c_row % 4 != 0 || !aligned16(s.b) || !aligned16(s.c)) {
    return "N and C's row stride must be multiples of 4 elements and B and C 16-byte aligned (16-byte loads of B, "
           "4-element stores of C)";
  }
  if (k_major ? s.k % 4 != 0 || s.b_col % 4 != 0 : s.b_row % 4 != 0) {
    return k_major ? "K and B's column stride must be multiples of 4 elements (16-byte loads along B's columns)"
                   : "B's row stride must be a multiple of 4 elements (16-byte loads along B's rows)";
  }
  const int64_t ctas = column_blocks(s) * row_passes(s) * narrow_gemm_slices(s, device.multiprocessors);
  if (ctas < std::max(device.multiprocessors, 1)) {
    return "its CTAs (" + std::to_string(columns_per_cta(s)) + " columns x row blocks x K slices of at least " +
           std::to_string(kNarrowMinSliceK) + " rows) would not cover every SM";
  }
  return "";
}

template <bool kKMajor>
std::string refusal_up_to_32(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, kKMajor, 1, kNarrowMaxRows);
}

template <bool kKMajor>
std::string refusal_33_to_64(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, kKMajor, kNarrowMaxRows + 1, kNarrowExactMaxRows);
}

GemmKernel narrow_entry(const char* name, bool k_major, int tile_m, bool exact_only,
                        std::string (*refusal)(const GemmShape&, const GemmDevice&)) {
  GemmKernel k;
  k.name = name;
  k.tier = GemmTier::narrow;
  k.dtype = DType::f32;
  k.math = GemmMath::simt;
  k.a_k_major = -1;
  k.b_k_major = k_major ? 1 : 0;
  k.architecture = 0;
  k.tile_m = tile_m;
  k.tile_n = k_major ? kNarrowKMajorColumns : kNarrowColumns;
  k.exact_only = exact_only;
  k.refusal = refusal;
  k.make_runner = &make_narrow_runner;
  return k;
}

}  // namespace

std::string narrow_gemm_refusal(const GemmShape& s, const GemmDevice& device) {
  return refusal_up_to_32<false>(s, device);
}

const GemmKernel& narrow_gemm_kernel() {
  static const GemmKernel kernel =
      narrow_entry("narrow_f32_bmn_m32x128", false, kNarrowMaxRows, false, &refusal_up_to_32<false>);
  return kernel;
}

const GemmKernel& narrow_exact_gemm_kernel() {
  static const GemmKernel kernel =
      narrow_entry("narrow_f32_bmn_m64x128_exact", false, kNarrowExactMaxRows, true, &refusal_33_to_64<false>);
  return kernel;
}

const GemmKernel& narrow_k_major_gemm_kernel() {
  static const GemmKernel kernel =
      narrow_entry("narrow_f32_bk_m32x32", true, kNarrowMaxRows, false, &refusal_up_to_32<true>);
  return kernel;
}

const GemmKernel& narrow_k_major_exact_gemm_kernel() {
  static const GemmKernel kernel =
      narrow_entry("narrow_f32_bk_m64x32_exact", true, kNarrowExactMaxRows, true, &refusal_33_to_64<true>);
  return kernel;
}

}  // namespace attnkit::cuda::gemm
