// The slice rule of split-K and the ordered sum of its slices (gemm_split_k.hpp). The sum: one thread per
// 4 consecutive elements of a row of C (16-byte loads of each slice's partial sums, added in slice order,
// one store of the 4 results in C's type: 8 or 16 bytes), a grid-stride loop over M x N / 4. After a Hopper
// split-K GEMM it is launched as a programmatic dependent (PDL): its CTAs are scheduled once every GEMM CTA has
// begun its last tile's epilogue (CUTLASS's launch_dependents, on in the split-K instances), and wait in
// griddepcontrol.wait until the GEMM grid has finished, so its launch overlaps the GEMM's tail instead of following it.
#include "cuda/gemm/gemm_split_k.hpp"

#include <algorithm>
#include <cstdint>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/programmatic_launch.cuh"
#include "cuda/gemm/gemm_element.cuh"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kSumThreads = 256;
constexpr int64_t kPartialAlignment = 256;

template <class T>
struct alignas(4 * sizeof(T)) Quad {
  T value[4];
};

template <class T>
__global__ void __launch_bounds__(kSumThreads)
    sum_slices(const float4* partials, int64_t slice_quads, int slices, int64_t row_quads, T* c, int64_t c_row,
               float alpha, float beta) {
  // A programmatic dependent of the GEMM that wrote the partials: nothing is read before that grid has finished
  // and its writes are visible (returns at once for an ordinary launch).
  wait_for_preceding_grid();
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x; q < slice_quads;
       q += static_cast<int64_t>(gridDim.x) * kSumThreads) {
    float4 sum = partials[q];
#pragma unroll 4
    for (int l = 1; l < slices; ++l) {
      const float4 part = partials[l * slice_quads + q];
      sum.x += part.x, sum.y += part.y, sum.z += part.z, sum.w += part.w;
    }
    const int64_t i = q / row_quads, j = q % row_quads * 4;
    auto* out = reinterpret_cast<Quad<T>*>(c + i * c_row + j);
    const float in[4] = {sum.x, sum.y, sum.z, sum.w};
    Quad<T> result;
    if (beta != 0.0f) {
      const Quad<T> old = *out;
      for (int e = 0; e < 4; ++e) result.value[e] = from_float<T>(alpha * in[e] + beta * to_float(old.value[e]));
    } else {
      for (int e = 0; e < 4; ++e) result.value[e] = from_float<T>(alpha * in[e]);
    }
    *out = result;
  }
}

template <class T>
void launch_sum(unsigned blocks, bool programmatic, cudaStream_t stream, const float4* partials, int64_t slice_quads,
                int slices, int64_t row_quads, void* c, int64_t c_row, float alpha, float beta) {
  check_cuda(launch_kernel(sum_slices<T>, dim3(blocks), dim3(kSumThreads), 0, stream, programmatic, partials,
                           slice_quads, slices, row_quads, static_cast<T*>(c), c_row, alpha, beta),
             "gemm split-K sum");
}

}  // namespace

int gemm_split_k_slices(const GemmShape& s, int tile_m, int tile_n, int tile_k, int multiprocessors, int least_16_bit) {
  if (s.batch != 1 || s.product_zero || tile_m <= 0 || tile_n <= 0 || tile_k <= 0 || s.m <= 0 || s.n <= 0) return 0;
  const int64_t tiles = (s.m + tile_m - 1) / tile_m * ((s.n + tile_n - 1) / tile_n);
  const int64_t most = std::min<int64_t>(multiprocessors / tiles, kMaxSplitKSlices);
  // Slice offsets along K stay 16-byte aligned (TMA's rule for the batch stride that addresses them).
  const int64_t vector = 16 / static_cast<int64_t>(dtype_size(s.dtype));
  const int least = s.dtype == DType::f32 ? kMinSplitKSlicesFp32 : least_16_bit;
  for (int64_t slices = most; slices >= least; --slices) {
    if (s.k % slices != 0) continue;
    const int64_t slice = s.k / slices;
    if (slice % vector == 0 && slice >= int64_t{kMinSplitKTilesPerSlice} * tile_k) return static_cast<int>(slices);
  }
  return 0;
}

int gemm_swapped_split_k_slices(const GemmShape& s, int tile_m, int tile_n, int tile_k, int multiprocessors,
                                int least_16_bit) {
  // Token tiles narrower than 64 columns (the ping-pong rows of 64 weight rows) take only the tokens of one tile,
  // in one slice where the weight's tiles alone fill 0.9 to 2 waves.
  if (tile_m < 64 && s.m > tile_m) return 0;
  if (tile_m < 64 && s.batch == 1 && !s.product_zero && s.n > 0 && s.k > 0 &&
      s.k * static_cast<int64_t>(dtype_size(s.dtype)) % 16 == 0) {
    const int64_t tiles = (s.n + tile_n - 1) / tile_n;
    if (10 * tiles >= 9 * int64_t{multiprocessors} && tiles <= 2 * int64_t{multiprocessors}) return 1;
  }
  const int slices = gemm_split_k_slices(s, tile_m, tile_n, tile_k, multiprocessors, least_16_bit);
  if (slices > 0 || s.dtype != DType::f32) return slices;
  if (s.batch != 1 || s.product_zero || tile_m <= 0 || s.m <= 0 || s.m > tile_m || s.n <= 0 || s.k <= 0) return 0;
  return s.k % 4 == 0 ? 1 : 0;  // K of whole 16-byte vectors, as the slices of the rule above
}

int64_t gemm_split_k_partial_bytes(const GemmShape& s, int slices) {
  const int64_t bytes = int64_t{slices} * s.m * s.n * static_cast<int64_t>(sizeof(float));
  return (bytes + kPartialAlignment - 1) / kPartialAlignment * kPartialAlignment;
}

SplitKSlices::SplitKSlices(const GemmShape& shape, int slices, int multiprocessors, bool programmatic)
    : slices_(slices), multiprocessors_(multiprocessors < 1 ? 1 : multiprocessors), programmatic_(programmatic) {
  if (slices_ > 1) partial_bytes_ = gemm_split_k_partial_bytes(shape, slices_);
}

void SplitKSlices::sum(const GemmShape& shape, void* workspace, float alpha, float beta, cudaStream_t stream) const {
  if (slices_ > 1) {
    sum_split_k_slices(shape, partials(workspace), slices_, alpha, beta, multiprocessors_, stream, programmatic_);
  }
}

void sum_split_k_slices(const GemmShape& s, const float* partials, int slices, float alpha, float beta,
                        int multiprocessors, cudaStream_t stream, bool programmatic) {
  if (s.n % 4 != 0) throw Error(Status::internal, "split-K sum: N must be a multiple of 4");
  const int64_t row_quads = s.n / 4, slice_quads = s.m * row_quads;
  if (slice_quads == 0) return;
  const auto blocks = static_cast<unsigned>(
      std::clamp<int64_t>((slice_quads + kSumThreads - 1) / kSumThreads, 1, int64_t{std::max(multiprocessors, 1)} * 8));
  const auto* quads = reinterpret_cast<const float4*>(partials);
  if (s.dtype == DType::bf16) {
    launch_sum<__nv_bfloat16>(blocks, programmatic, stream, quads, slice_quads, slices, row_quads, s.c, s.c_row, alpha,
                              beta);
  } else if (s.dtype == DType::f16) {
    launch_sum<__half>(blocks, programmatic, stream, quads, slice_quads, slices, row_quads, s.c, s.c_row, alpha, beta);
  } else if (s.dtype == DType::f32) {
    launch_sum<float>(blocks, programmatic, stream, quads, slice_quads, slices, row_quads, s.c, s.c_row, alpha, beta);
  } else {
    throw Error(Status::internal, "split-K sum: C must be f16, bf16 or f32");
  }
}

}  // namespace attnkit::cuda::gemm
