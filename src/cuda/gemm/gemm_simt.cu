// SIMT GEMM: fp32 FMA on CUDA cores, exact to fp32 rounding (the fp32 reference of the tensor-core
// kernels), reading every operand through its strides. Tiling: a CTA of 256 threads computes 64 x 64
// tiles of C (a persistent loop over batch x tiles); each step of 16 along k stages a 64 x 16 panel of A
// and a 16 x 64 panel of B in shared memory as fp32 (loaded along the operand's contiguous dimension,
// bounds-checked, zero outside), and each thread accumulates a 4 x 4 sub-tile whose rows and columns are
// 16 apart (conflict-free shared reads). The epilogue writes alpha * acc + beta * C in C's dtype and reads
// C only when beta != 0, so a NaN-poisoned C with beta 0 is overwritten.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_element.cuh"
#include "cuda/gemm/gemm_simt.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 16;
constexpr int kThreads = 256;

struct SimtParams {
  int64_t m, n, k, batch;
  int64_t a_row, a_col, a_batch, b_row, b_col, b_batch, c_row, c_batch;
  const void* a;
  const void* b;
  void* c;
  float alpha, beta;
};

template <class T>
__global__ void __launch_bounds__(kThreads) simt_gemm_kernel(const SimtParams p) {
  __shared__ float sa[kTileK][kTileM + 4];
  __shared__ float sb[kTileK][kTileN + 4];
  const auto* a_all = static_cast<const T*>(p.a);
  const auto* b_all = static_cast<const T*>(p.b);
  auto* c_all = static_cast<T*>(p.c);
  const bool a_k_contiguous = p.a_col == 1;
  const bool b_k_contiguous = p.b_row == 1;
  const int tx = static_cast<int>(threadIdx.x) % 16;
  const int ty = static_cast<int>(threadIdx.x) / 16;
  const int64_t tiles_m = (p.m + kTileM - 1) / kTileM;
  const int64_t tiles_n = (p.n + kTileN - 1) / kTileN;
  const int64_t tiles = tiles_m * tiles_n * p.batch;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t l = tile / (tiles_m * tiles_n);
    const int64_t i0 = tile / tiles_n % tiles_m * kTileM;
    const int64_t j0 = tile % tiles_n * kTileN;
    const T* a = a_all + l * p.a_batch;
    const T* b = b_all + l * p.b_batch;
    float acc[4][4] = {};
    for (int64_t p0 = 0; p0 < p.k; p0 += kTileK) {
      for (int e = static_cast<int>(threadIdx.x); e < kTileM * kTileK; e += kThreads) {
        const int ii = a_k_contiguous ? e / kTileK : e % kTileM;
        const int pp = a_k_contiguous ? e % kTileK : e / kTileM;
        const int64_t gi = i0 + ii, gp = p0 + pp;
        sa[pp][ii] = gi < p.m && gp < p.k ? to_float(a[gi * p.a_row + gp * p.a_col]) : 0.0f;
      }
      for (int e = static_cast<int>(threadIdx.x); e < kTileN * kTileK; e += kThreads) {
        const int jj = b_k_contiguous ? e / kTileK : e % kTileN;
        const int pp = b_k_contiguous ? e % kTileK : e / kTileN;
        const int64_t gj = j0 + jj, gp = p0 + pp;
        sb[pp][jj] = gj < p.n && gp < p.k ? to_float(b[gp * p.b_row + gj * p.b_col]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int pp = 0; pp < kTileK; ++pp) {
        float ar[4], br[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) ar[r] = sa[pp][ty + 16 * r];
#pragma unroll
        for (int c = 0; c < 4; ++c) br[c] = sb[pp][tx + 16 * c];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(ar[r], br[c], acc[r][c]);
        }
      }
      __syncthreads();
    }
    T* c = c_all + l * p.c_batch;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t gi = i0 + ty + 16 * r;
      if (gi >= p.m) continue;
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        const int64_t gj = j0 + tx + 16 * cc;
        if (gj >= p.n) continue;
        T& out = c[gi * p.c_row + gj];
        float value = p.alpha * acc[r][cc];
        if (p.beta != 0.0f) value = fmaf(p.beta, to_float(out), value);
        out = from_float<T>(value);
      }
    }
  }
}

template <class T>
class SimtRunner final : public GemmRunner {
 public:
  explicit SimtRunner(int multiprocessors) : multiprocessors_(std::max(multiprocessors, 1)) {}
  int64_t workspace_bytes() const override { return 0; }
  void run(const GemmShape& s, float alpha, float beta, void*, cudaStream_t stream) const override {
    SimtParams p{s.m,       s.n,     s.product_zero ? 0 : s.k,
                 s.batch,   s.a_row, s.a_col,
                 s.a_batch, s.b_row, s.b_col,
                 s.b_batch, s.c_row, s.c_batch,
                 s.a,       s.b,     s.c,
                 alpha,     beta};
    const int64_t tiles = (s.m + kTileM - 1) / kTileM * ((s.n + kTileN - 1) / kTileN) * s.batch;
    // Enough CTAs to fill the device several times over; the tile loop covers the rest.
    const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{multiprocessors_} * 16));
    simt_gemm_kernel<T><<<grid, kThreads, 0, stream>>>(p);
    check_launch("simt_gemm_kernel");
  }

 private:
  int multiprocessors_;
};

std::string no_refusal(const GemmShape&, const GemmDevice&) { return ""; }

template <class T>
std::unique_ptr<GemmRunner> make_simt_runner(const GemmShape&, const GemmDevice& device) {
  return std::make_unique<SimtRunner<T>>(device.multiprocessors);
}

template <class T>
GemmKernel simt_entry(const char* name, DType dtype) {
  GemmKernel kernel;
  kernel.name = name;
  kernel.tier = GemmTier::simt;
  kernel.dtype = dtype;
  kernel.math = GemmMath::simt;
  kernel.refusal = &no_refusal;
  kernel.make_runner = &make_simt_runner<T>;
  return kernel;
}

}  // namespace

const GemmKernel& simt_gemm_kernel(DType dtype) {
  static const GemmKernel f32 = simt_entry<float>("simt_f32", DType::f32);
  static const GemmKernel f16 = simt_entry<__half>("simt_f16", DType::f16);
  static const GemmKernel bf16 = simt_entry<__nv_bfloat16>("simt_bf16", DType::bf16);
  switch (dtype) {
    case DType::f16: return f16;
    case DType::bf16: return bf16;
    default: return f32;
  }
}

}  // namespace attnkit::cuda::gemm
