// The narrow-M GEMM (gemm_narrow.hpp): fp32, and bf16 / f16 for M <= 4 with B MN-major (the element type T is a
// template parameter; A and B are widened to fp32 as they are read, C written in T). Grid: column blocks x row blocks
// (blockIdx.x = column block x row blocks + row block) x the K slices (blockIdx.y); 256 threads a CTA. A CTA walks its
// K slice in chunks of 256 rows of K, A's chunk staged in shared memory (rows < M, zeros above M and past K). kRows (4,
// 16 or 32) bounds the rows a CTA computes at compile time so that the accumulators stay in registers (M <= 4: 4, M <=
// 16: 16, else 32, rows_per_block); the 32-row instance (over 200 registers a thread) runs one CTA per SM, the others
// two. Larger M runs in row blocks (two of 32 for M 33-64 with B MN-major; blocks of 16 with B K-major), adjacent in
// the grid, so that the later ones read B's columns from L2 while the first streams them. Each CTA writes alpha * sum +
// beta * C when K is one slice, else its slice's fp32 partial sums, which the split-K sum (gemm_split_k.hpp) adds in
// slice order into C. B MN-major (x @ W): 32 lanes x 16 bytes of columns a CTA (128 fp32, 256 16-bit); A's chunk as
// [k][row]; each warp takes the chunk's rows w, w + 8, ... of B, loading 8 of them (16 bytes a lane: the warp reads 512
// contiguous bytes of a row) before multiplying them into its lane's kRows x (4 or 8) accumulators, one broadcast
// shared-memory read of A's column per row of B (one or two rows only when M is); the 8 warps' sums are added in warp
// order in shared memory. A's next chunk is read into registers during the current one (the 4-row instance). B K-major
// (x @ W^T): narrow_gemm_k_major_kernel, below.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/common/programmatic_launch.cuh"
#include "cuda/gemm/gemm_element.cuh"
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
  const void* a;   // T (the entry's element type)
  const void* b;
  void* c;
  float* partials;  // slices x M x N fp32, or null when K is one slice
  float alpha, beta;
};

template <class T>
constexpr int kVector = 16 / static_cast<int>(sizeof(T));  // elements of a 16-byte load

// The 16 bytes at `raw` as kVector<T> floats.
template <class T>
__device__ __forceinline__ void widen(const uint4& raw, float (&out)[kVector<T>]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVector<T>; ++i) out[i] = to_float(e[i]);
}

// acc[r][v] += A(r, k_u) * B(k_u, v) for the kUnroll rows k_u of B a warp loaded (raw[u] is row base + u * kWarps of
// the chunk, sa[k][r] its A values), rows r < kActive: kActive is kRows, or 1 or 2 when M is (a quarter or a half of
// the 4-row instance's multiply-adds, without a branch per row).
template <int kActive, class T, int kRows>
__device__ __forceinline__ void multiply_loaded_rows(const uint4 (&raw)[kUnroll], const float (*sa)[kRows], int base,
                                                     float (&acc)[kRows][kVector<T>]) {
  constexpr int kV = kVector<T>;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float bv[kV];
    widen<T>(raw[u], bv);
    const float* a_column = sa[base + u * kWarps];
    if constexpr (kActive == 1) {
      const float a = a_column[0];
#pragma unroll
      for (int v = 0; v < kV; ++v) acc[0][v] = fmaf(a, bv[v], acc[0][v]);
    } else if constexpr (kActive == 2) {
      const float2 a2 = *reinterpret_cast<const float2*>(a_column);
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        acc[0][v] = fmaf(a2.x, bv[v], acc[0][v]);
        acc[1][v] = fmaf(a2.y, bv[v], acc[1][v]);
      }
    } else {
#pragma unroll
      for (int r4 = 0; r4 < kActive; r4 += 4) {
        const float4 a4 = *reinterpret_cast<const float4*>(a_column + r4);
        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
#pragma unroll
          for (int v = 0; v < kV; ++v) acc[r4 + q][v] = fmaf(av[q], bv[v], acc[r4 + q][v]);
        }
      }
    }
  }
}

// C's element (row, col) = alpha * sum + beta * C (C not read when beta is 0).
template <class T>
__device__ __forceinline__ void write_c(const NarrowParams& p, int64_t row, int64_t col, float sum) {
  T& out = static_cast<T*>(p.c)[row * p.c_row + col];
  out = from_float<T>(p.beta != 0.0f ? fmaf(p.beta, to_float(out), p.alpha * sum) : p.alpha * sum);
}

template <class T, int kRows>
__global__ void __launch_bounds__(kThreads, kRows <= 16 ? kNarrowCtasPerSm : 1)
    narrow_gemm_kernel(const NarrowParams p) {
  constexpr int kV = kVector<T>;
  constexpr int kColumns = 32 * kV;  // 128 (fp32) or 256 (16-bit) columns of C
  __shared__ __align__(16) float sa[kChunk][kRows];
  __shared__ __align__(16) float sums[kRows][kColumns];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t column_block = static_cast<int64_t>(blockIdx.x) / p.passes;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % p.passes * kRows;
  const int64_t rows = p.m - row0 < kRows ? p.m - row0 : kRows;
  const T* a_rows = static_cast<const T*>(p.a) + row0 * p.a_row;
  const int64_t column = column_block * kColumns + lane * kV;
  const bool column_in = column < p.n;  // N is a multiple of kV: a vector is wholly in or out
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;
  const T* b_column = static_cast<const T*>(p.b) + column;

  float acc[kRows][kV];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int v = 0; v < kV; ++v) acc[r][v] = 0.0f;
  }

  // A's next chunk, read into registers before the current chunk's B loop and stored (widened) after it, so that no
  // chunk waits on A's loads: the 4-row instance only (the others' registers are full; they load A at the chunk's
  // start).
  constexpr int kAPerThread = kChunk * kRows / kThreads;
  constexpr bool kAHeld = kRows == 4;
  T a_next[kAHeld ? kAPerThread : 1];
  // Element e of A's chunk starting at K index `chunk` (row e % kRows, K offset e / kRows): zero above M and past K.
  auto load_a = [&](int64_t chunk, int e) -> T {
    const int r = e % kRows, kk = e / kRows;
    const int64_t kg = chunk + kk;
    return r < rows && kg < k_end ? a_rows[r * p.a_row + kg * p.a_col] : from_float<T>(0.0f);
  };
  if constexpr (kAHeld) {
#pragma unroll
    for (int i = 0; i < kAPerThread; ++i) a_next[i] = load_a(k_begin, static_cast<int>(threadIdx.x) + i * kThreads);
  }

  for (int64_t chunk = k_begin; chunk < k_end; chunk += kChunk) {
    // A's chunk, row index fastest (consecutive shared-memory words).
    if constexpr (kAHeld) {
#pragma unroll
      for (int i = 0; i < kAPerThread; ++i) {
        const int e = static_cast<int>(threadIdx.x) + i * kThreads;
        sa[e / kRows][e % kRows] = to_float(a_next[i]);
      }
    } else {
      for (int e = static_cast<int>(threadIdx.x); e < kChunk * kRows; e += kThreads) {
        sa[e / kRows][e % kRows] = to_float(load_a(chunk, e));
      }
    }
    __syncthreads();
    if constexpr (kAHeld) {
      if (chunk + kChunk < k_end) {
#pragma unroll
        for (int i = 0; i < kAPerThread; ++i) {
          a_next[i] = load_a(chunk + kChunk, static_cast<int>(threadIdx.x) + i * kThreads);
        }
      }
    }
#pragma unroll 1
    for (int base = warp; base < kChunk; base += kWarps * kUnroll) {
      uint4 raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t kg = chunk + base + u * kWarps;
        raw[u] = column_in && kg < k_end ? __ldcs(reinterpret_cast<const uint4*>(b_column + kg * p.b_row))
                                         : make_uint4(0u, 0u, 0u, 0u);
      }
      if (kRows == 4 && rows == 1) {
        multiply_loaded_rows<1, T>(raw, sa, base, acc);
      } else if (kRows == 4 && rows == 2) {
        multiply_loaded_rows<2, T>(raw, sa, base, acc);
      } else {
        multiply_loaded_rows<kRows, T>(raw, sa, base, acc);
      }
    }
    __syncthreads();
  }
  signal_dependents();

  // The warps' sums, added in warp order.
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int v = 0; v < kV; v += 4) {
          auto* s = reinterpret_cast<float4*>(&sums[r][lane * kV + v]);
          if (w == 0) {
            *s = make_float4(acc[r][v], acc[r][v + 1], acc[r][v + 2], acc[r][v + 3]);
          } else {
            float4 x = *s;
            x.x += acc[r][v], x.y += acc[r][v + 1], x.z += acc[r][v + 2], x.w += acc[r][v + 3];
            *s = x;
          }
        }
      }
    }
    __syncthreads();
  }

  const int64_t first = column_block * kColumns;
  for (int e = static_cast<int>(threadIdx.x); e < kRows * (kColumns / 4); e += kThreads) {
    const int r = e / (kColumns / 4), j = e % (kColumns / 4) * 4;
    const int64_t col = first + j;
    if (r >= rows || col >= p.n) continue;
    const float4 v = *reinterpret_cast<const float4*>(&sums[r][j]);
    if (p.partials != nullptr) {
      *reinterpret_cast<float4*>(p.partials + (static_cast<int64_t>(blockIdx.y) * p.m + row0 + r) * p.n + col) = v;
    } else {
      write_c<T>(p, row0 + r, col, v.x);
      write_c<T>(p, row0 + r, col + 1, v.y);
      write_c<T>(p, row0 + r, col + 2, v.z);
      write_c<T>(p, row0 + r, col + 3, v.w);
    }
  }
}

// B K-major (x @ W^T with a row-major W [N, K]), fp32: a warp owns 4 columns of C, its lanes 4 consecutive values of K
// each (the warp reads 512 contiguous bytes of each of the 4 rows of W per step along K), A's chunk staged as [row][k]
// and read as 16-byte vectors a row; each lane's kRows x 4 partial dot products are summed over the warp by an xor
// butterfly (every lane ends with the same sums, in the same order) and written by the lane of their index. kRows is 4
// or 16 (M above 16 runs in row blocks of 16, rows_per_block). A chunk is kKMajorChunkElements / kRows values of K
// (2048 or 512: 16 or 4 steps of every warp), and A's next chunk is copied into the second of two shared buffers
// (cp.async, 16-byte copies when A's rows are K-contiguous and aligned) while the current one is multiplied, so no
// chunk waits on A's loads and a barrier comes every 8 KB of B a warp.
constexpr int kKMajorChunkElements = 8192;  // A's values per chunk buffer: 32 KB, two buffers 64 KB of shared memory
constexpr int kKMajorSharedBytes = 2 * kKMajorChunkElements * static_cast<int>(sizeof(float));

template <int kRows>
__device__ __forceinline__ void copy_a_chunk_async(const NarrowParams& p, const float* a_rows, int64_t rows,
                                                   int64_t chunk, int64_t k_end, bool a_vectors, float* buffer) {
  constexpr int kKChunk = kKMajorChunkElements / kRows;
  // Rolled loops: a cp.async does not wait for its data.
  if (a_vectors) {  // A K-contiguous, rows and base 16-byte aligned: k_end, chunk and kk are multiples of 4
#pragma unroll 1
    for (int e = static_cast<int>(threadIdx.x); e < kKMajorChunkElements / 4; e += kThreads) {
      const int r = e / (kKChunk / 4), kk = e % (kKChunk / 4) * 4;
      const int64_t kg = chunk + kk;
      const bool valid = r < rows && kg < k_end;
      copy_16_bytes_async(shared_address(buffer + r * kKChunk + kk), valid ? a_rows + r * p.a_row + kg : p.a, valid);
    }
  } else {
#pragma unroll 1
    for (int e = static_cast<int>(threadIdx.x); e < kKMajorChunkElements; e += kThreads) {
      const int r = e / kKChunk, kk = e % kKChunk;
      const int64_t kg = chunk + kk;
      const bool valid = r < rows && kg < k_end;
      copy_4_bytes_async(shared_address(buffer + r * kKChunk + kk), valid ? a_rows + r * p.a_row + kg * p.a_col : p.a,
                         valid);
    }
  }
  commit_async_copies();
}

template <int kRows>
__global__ void __launch_bounds__(kThreads, kNarrowCtasPerSm) narrow_gemm_k_major_kernel(const NarrowParams p) {
  static_assert(kRows <= 16, "two CTAs an SM: M above 16 runs in row blocks of 16");
  constexpr int kColumnsPerWarp = kNarrowKMajorColumns / kWarps;
  constexpr int kStep = 32 * 4;
  constexpr int kKChunk = kKMajorChunkElements / kRows;
  extern __shared__ __align__(16) float sa_buffers[];  // [2][kRows][kKChunk]
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t column_block = static_cast<int64_t>(blockIdx.x) / p.passes;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) % p.passes * kRows;
  const int64_t rows = p.m - row0 < kRows ? p.m - row0 : kRows;
  const float* a_rows = static_cast<const float*>(p.a) + row0 * p.a_row;
  const float* b = static_cast<const float*>(p.b);
  const int64_t column0 = column_block * kNarrowKMajorColumns + warp * kColumnsPerWarp;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.slice;
  const int64_t k_end = k_begin + p.slice < p.k ? k_begin + p.slice : p.k;
  const bool a_vectors = p.a_col == 1 && p.a_row % 4 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0;

  float acc[kColumnsPerWarp][kRows];
#pragma unroll
  for (int c = 0; c < kColumnsPerWarp; ++c) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = 0.0f;
  }

  if (k_begin < k_end) copy_a_chunk_async<kRows>(p, a_rows, rows, k_begin, k_end, a_vectors, sa_buffers);
  int buffer = 0;
  for (int64_t chunk = k_begin; chunk < k_end; chunk += kKChunk, buffer ^= 1) {
    // The other buffer's readers finished at the previous chunk's closing barrier.
    if (chunk + kKChunk < k_end) {
      copy_a_chunk_async<kRows>(p, a_rows, rows, chunk + kKChunk, k_end, a_vectors,
                                sa_buffers + (buffer ^ 1) * kKMajorChunkElements);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();
    const float* sa = sa_buffers + buffer * kKMajorChunkElements;
#pragma unroll 1
    for (int step = 0; step < kKChunk; step += kStep) {
      const int kk = step + lane * 4;
      const int64_t kg = chunk + kk;  // k_end and kg are multiples of 4: a vector is wholly in or out
      uint4 w[kColumnsPerWarp];
#pragma unroll
      for (int c = 0; c < kColumnsPerWarp; ++c) {
        const int64_t n = column0 + c;
        w[c] = n < p.n && kg < k_end ? __ldcs(reinterpret_cast<const uint4*>(b + n * p.b_col + kg))
                                     : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int c = 0; c < kColumnsPerWarp; ++c) {
        float wv[4];
        widen<float>(w[c], wv);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float4 a4 = *reinterpret_cast<const float4*>(&sa[r * kKChunk + kk]);
          float v = acc[c][r];
          v = fmaf(a4.x, wv[0], v);
          v = fmaf(a4.y, wv[1], v);
          v = fmaf(a4.z, wv[2], v);
          v = fmaf(a4.w, wv[3], v);
          acc[c][r] = v;
        }
      }
    }
    __syncthreads();
  }
  signal_dependents();

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
        write_c<float>(p, row0 + r, n, v);
      }
    }
  }
}

// Elements of a 16-byte vector of the problem's type.
int64_t vector_elements(const GemmShape& s) { return 16 / static_cast<int64_t>(dtype_size(s.dtype)); }

// Columns of C per CTA: with B MN-major 32 lanes x a vector (128 fp32, 256 16-bit), with B K-major 32 (8 warps x 4).
int64_t columns_per_cta(const GemmShape& s) {
  return s.b_k_major() ? kNarrowKMajorColumns : kNarrowColumns * 4 / static_cast<int64_t>(dtype_size(s.dtype));
}

int64_t column_blocks(const GemmShape& s) { return (s.n + columns_per_cta(s) - 1) / columns_per_cta(s); }

// Rows of one row block: B MN-major 4, 16 or 32 (two blocks of 32 for M 33-64); B K-major 4 or 16 (blocks of 16 from
// M = 17: on an H200 its 32-row instance ran 32 x 14336 x 4096 at 0.69x cuBLAS, its 16-row one 16 x 16384 x 4096 at
// 1.29x, docs/perf.md).
int64_t rows_per_block(const GemmShape& s) {
  if (s.m <= 4) return 4;
  if (s.m <= 16 || s.b_k_major()) return 16;
  return kNarrowMaxRows;
}

// Row blocks (adjacent in the grid, so that the later ones read B's columns from L2 while the first streams them).
int64_t row_passes(const GemmShape& s) { return (s.m + rows_per_block(s) - 1) / rows_per_block(s); }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The K-major instance of kRows, with its two A buffers of dynamic shared memory (over the 48 KB a launch gets unasked:
// the limit is raised once per device).
template <int kRows>
void launch_k_major(dim3 grid, const NarrowParams& p, cudaStream_t stream) {
  check_cuda(raise_dynamic_shared_memory_once(narrow_gemm_k_major_kernel<kRows>, kKMajorSharedBytes),
             "cudaFuncSetAttribute(narrow_gemm_k_major_kernel)");
  narrow_gemm_k_major_kernel<kRows><<<grid, kThreads, kKMajorSharedBytes, stream>>>(p);
}

class NarrowRunner final : public GemmRunner {
 public:
  NarrowRunner(const GemmShape& shape, const GemmDevice& device)
      : slices_(shape, narrow_gemm_slices(shape, device.multiprocessors), device.multiprocessors,
                device.capability >= 90) {}

  int64_t workspace_bytes() const override { return slices_.workspace_bytes(); }

  void run(const GemmShape& s, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    NarrowParams p{};
    p.m = s.m, p.n = s.n, p.k = s.k;
    p.a_row = s.a_row, p.a_col = s.a_col, p.b_row = s.b_row, p.b_col = s.b_col, p.c_row = s.c_row;
    p.slice = (s.k + slices_.count() - 1) / slices_.count();
    const int64_t v = vector_elements(s);
    if (s.b_k_major()) p.slice = (p.slice + v - 1) / v * v;  // whole 16-byte vectors of B's rows in each slice
    p.passes = row_passes(s);
    p.a = s.a, p.b = s.b, p.c = s.c;
    p.partials = slices_.partials(workspace);
    p.alpha = alpha, p.beta = beta;
    const dim3 grid(static_cast<unsigned>(column_blocks(s) * p.passes), static_cast<unsigned>(slices_.count()));
    if (s.dtype == DType::bf16) {
      narrow_gemm_kernel<__nv_bfloat16, kNarrow16MaxRows><<<grid, kThreads, 0, stream>>>(p);
    } else if (s.dtype == DType::f16) {
      narrow_gemm_kernel<__half, kNarrow16MaxRows><<<grid, kThreads, 0, stream>>>(p);
    } else if (s.b_k_major()) {  // the instance of rows_per_block, which p.passes counts in
      if (rows_per_block(s) == 4) {
        launch_k_major<4>(grid, p, stream);
      } else {
        launch_k_major<16>(grid, p, stream);
      }
    } else if (rows_per_block(s) == 4) {
      narrow_gemm_kernel<float, 4><<<grid, kThreads, 0, stream>>>(p);
    } else if (rows_per_block(s) == 16) {
      narrow_gemm_kernel<float, 16><<<grid, kThreads, 0, stream>>>(p);
    } else {
      narrow_gemm_kernel<float, kNarrowMaxRows><<<grid, kThreads, 0, stream>>>(p);
    }
    check_launch("narrow_gemm_kernel");
    slices_.sum(s, workspace, alpha, beta, stream);
  }

 private:
  SplitKSlices slices_;
};

std::unique_ptr<GemmRunner> make_narrow_runner(const GemmShape& shape, const GemmDevice& device) {
  return std::make_unique<NarrowRunner>(shape, device);
}

}  // namespace

int narrow_slices_for(int64_t blocks, int64_t k, int multiprocessors) {
  blocks = std::max<int64_t>(blocks, 1);
  const int64_t wanted = std::max<int64_t>(int64_t{kNarrowCtasPerSm} * std::max(multiprocessors, 1) / blocks, 1);
  const int64_t most = std::max<int64_t>(k / kNarrowMinSliceK, 1);
  return static_cast<int>(std::clamp<int64_t>(std::min(wanted, most), 1, kNarrowMaxSlices));
}

int narrow_gemm_slices(const GemmShape& s, int multiprocessors) {
  return narrow_slices_for(column_blocks(s) * row_passes(s), s.k, multiprocessors);
}

std::string narrow_operand_refusal(const GemmShape& s, DType dtype, bool k_major, int64_t least, int64_t most) {
  if (s.dtype != dtype) return std::string(dtype_name(dtype)) + " only";
  if (s.batch != 1) return "batch 1 only (a batch sharing B is folded into M before)";
  if (s.m < least || s.m > most || s.n < 1 || s.k < 1) {
    return "M from " + std::to_string(least) + " to " + std::to_string(most) + " rows, N and K at least 1";
  }
  if (s.b_k_major() != k_major)
    return k_major ? "B must be K-major (K contiguous)" : "B must be MN-major (N contiguous)";
  const int64_t v = vector_elements(s);
  const std::string vector = std::to_string(v) + " elements (16-byte loads along B's ";
  if (s.n % v != 0 || s.c_row % 4 != 0 || !aligned16(s.b) || !aligned16(s.c)) {
    return "N must be a multiple of " + std::to_string(v) +
           " elements, C's row stride of 4, and B and C 16-byte "
           "aligned (16-byte loads of B, 4-element stores of C)";
  }
  if (k_major ? s.k % v != 0 || s.b_col % v != 0 : s.b_row % v != 0) {
    return k_major ? "K and B's column stride must be multiples of " + vector + "columns)"
                   : "B's row stride must be a multiple of " + vector + "rows)";
  }
  return "";
}

namespace {

std::string refusal_for_rows(const GemmShape& s, const GemmDevice& device, DType dtype, bool k_major, int64_t least,
                             int64_t most) {
  if (std::string why = narrow_operand_refusal(s, dtype, k_major, least, most); !why.empty()) return why;
  const int64_t ctas = column_blocks(s) * row_passes(s) * narrow_gemm_slices(s, device.multiprocessors);
  if (ctas < std::max(device.multiprocessors, 1)) {
    return "its CTAs (" + std::to_string(columns_per_cta(s)) + " columns x row blocks x K slices of at least " +
           std::to_string(kNarrowMinSliceK) + " rows) would not cover every SM";
  }
  return "";
}

template <bool kKMajor>
std::string refusal_up_to_32(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, DType::f32, kKMajor, 1, kNarrowMaxRows);
}

template <bool kKMajor>
std::string refusal_33_to_64(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, DType::f32, kKMajor, kNarrowMaxRows + 1, kNarrowExactMaxRows);
}

template <DType kDType>
std::string refusal_16_bit(const GemmShape& s, const GemmDevice& device) {
  return refusal_for_rows(s, device, kDType, false, 1, kNarrow16MaxRows);
}

GemmKernel narrow_entry(const char* name, bool k_major, int tile_m, bool exact_only,
                        std::string (*refusal)(const GemmShape&, const GemmDevice&), DType dtype = DType::f32) {
  GemmKernel k;
  k.name = name;
  k.tier = GemmTier::narrow;
  k.dtype = dtype;
  k.math = GemmMath::simt;
  k.a_k_major = -1;
  k.b_k_major = k_major ? 1 : 0;
  k.architecture = 0;
  k.tile_m = tile_m;
  k.tile_n = k_major ? kNarrowKMajorColumns : kNarrowColumns * 4 / static_cast<int>(dtype_size(dtype));
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

const GemmKernel& narrow_16_bit_gemm_kernel(DType dtype) {
  static const GemmKernel bf16 =
      narrow_entry("narrow_bf16_bmn_m4x256", false, kNarrow16MaxRows, false, &refusal_16_bit<DType::bf16>, DType::bf16);
  static const GemmKernel f16 =
      narrow_entry("narrow_f16_bmn_m4x256", false, kNarrow16MaxRows, false, &refusal_16_bit<DType::f16>, DType::f16);
  return dtype == DType::bf16 ? bf16 : f16;
}

}  // namespace attnkit::cuda::gemm
