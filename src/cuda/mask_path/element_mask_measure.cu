// Counting kernel of the measuring pass: one CTA per tile at a time (grid-stride over every (mask slice,
// Q tile, KV tile)), its threads reading the tile's rows with coalesced loads — four mask bytes per load
// when the tile's rows are 4-byte aligned, one otherwise — then a block reduction; thread 0 adds the
// tile's count to the true entries and counts the tile as non-empty and as full. The mask is read exactly
// once: a mask broadcast over heads or batch is one slice, not one per head.
#include "cuda/mask_path/element_mask_measure.hpp"

#include <algorithm>

#include "cuda/common/cuda_check.hpp"

namespace attnkit::cuda::mask_path {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

struct MeasureParams {
  const uint8_t* mask = nullptr;
  int64_t stride_batch = 0;  // bytes (elements of a bool tensor)
  int64_t stride_head = 0;
  int64_t stride_row = 0;
  int64_t mask_heads = 1;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int32_t block_m = 0;
  int32_t block_n = 0;
  int64_t q_tiles = 0;
  int64_t kv_tiles = 0;
  int64_t tiles = 0;
  bool words = false;  // every tile row starts 4-byte aligned and holds a multiple of 4 entries but the last
};

enum Total { kTrueEntries = 0, kNonemptyTiles = 1, kFullTiles = 2, kTotals = 3 };

__device__ __forceinline__ uint32_t tile_count(const MeasureParams& p, const uint8_t* tile, int32_t rows,
                                               int32_t cols) {
  uint32_t count = 0;
  if (p.words && cols % 4 == 0) {
    const int32_t row_words = cols / 4;
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < rows * row_words; i += kThreads) {
      const int32_t r = i / row_words;
      const uint32_t word = reinterpret_cast<const uint32_t*>(tile + r * p.stride_row)[i - r * row_words];
      count += static_cast<uint32_t>(__popc(__vcmpne4(word, 0u))) / 8u;  // 0xff per non-zero byte
    }
  } else {
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < rows * cols; i += kThreads) {
      const int32_t r = i / cols;
      count += tile[r * p.stride_row + (i - r * cols)] != 0 ? 1u : 0u;
    }
  }
  return count;
}

__global__ void __launch_bounds__(kThreads) count_mask_tiles_kernel(const MeasureParams p, unsigned long long* totals) {
  __shared__ uint32_t warp_counts[kWarps];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const int64_t kv_tile = t % p.kv_tiles;
    const int64_t q_tile = t / p.kv_tiles % p.q_tiles;
    const int64_t slice = t / p.kv_tiles / p.q_tiles;
    const int64_t m0 = q_tile * p.block_m;
    const int64_t n0 = kv_tile * p.block_n;
    const auto rows = static_cast<int32_t>(min(static_cast<int64_t>(p.block_m), p.seq_q - m0));
    const auto cols = static_cast<int32_t>(min(static_cast<int64_t>(p.block_n), p.seq_k - n0));
    const uint8_t* tile = p.mask + (slice / p.mask_heads) * p.stride_batch + (slice % p.mask_heads) * p.stride_head +
                          m0 * p.stride_row + n0;
    uint32_t count = tile_count(p, tile, rows, cols);
    for (int offset = 16; offset > 0; offset /= 2) count += __shfl_down_sync(0xffffffffu, count, offset);
    if (lane == 0) warp_counts[warp] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t total = 0;
      for (int w = 0; w < kWarps; ++w) total += warp_counts[w];
      if (total > 0) {
        atomicAdd(&totals[kTrueEntries], static_cast<unsigned long long>(total));
        atomicAdd(&totals[kNonemptyTiles], 1ull);
        if (total == static_cast<uint32_t>(rows * cols)) atomicAdd(&totals[kFullTiles], 1ull);
      }
    }
    __syncthreads();  // warp_counts is reused by the next tile
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

detail::ElementMaskStats measure_element_mask(const TensorView& mask, int64_t seq_q, int64_t seq_k, int block_m,
                                              int block_n, cudaStream_t stream) {
  MeasureParams p;
  p.mask = static_cast<const uint8_t*>(mask.data);
  // A broadcast dimension (extent 1, or stride 0 as torch's expand makes it) is one slice, read once.
  const int64_t mask_batch = mask.strides[0] == 0 ? 1 : mask.extents[0];
  p.mask_heads = mask.strides[1] == 0 ? 1 : mask.extents[1];
  p.stride_batch = mask_batch > 1 ? mask.strides[0] : 0;
  p.stride_head = p.mask_heads > 1 ? mask.strides[1] : 0;
  p.stride_row = mask.strides[2];
  p.seq_q = seq_q;
  p.seq_k = seq_k;
  p.block_m = block_m;
  p.block_n = block_n;
  p.q_tiles = ceil_div(seq_q, block_m);
  p.kv_tiles = ceil_div(seq_k, block_n);
  detail::ElementMaskStats stats;
  stats.slices = mask_batch * p.mask_heads;
  p.tiles = stats.slices * p.q_tiles * p.kv_tiles;
  if (p.tiles == 0) return stats;
  const auto aligned = [](int64_t value) { return value % 4 == 0; };
  p.words = reinterpret_cast<std::uintptr_t>(p.mask) % 4 == 0 && aligned(p.stride_batch) && aligned(p.stride_head) &&
            aligned(p.stride_row) && block_n % 4 == 0;

  unsigned long long* totals = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&totals), sizeof(unsigned long long) * kTotals, stream),
             "cudaMallocAsync (element mask measurement)");
  unsigned long long host[kTotals] = {0, 0, 0};
  cudaError_t status = cudaMemsetAsync(totals, 0, sizeof(host), stream);
  if (status == cudaSuccess) {
    const auto blocks = static_cast<unsigned>(std::min(p.tiles, kMaxBlocks));
    count_mask_tiles_kernel<<<blocks, kThreads, 0, stream>>>(p, totals);
    status = cudaGetLastError();
  }
  if (status == cudaSuccess) status = cudaMemcpyAsync(host, totals, sizeof(host), cudaMemcpyDeviceToHost, stream);
  const cudaError_t freed = cudaFreeAsync(totals, stream);
  if (status == cudaSuccess) status = freed;
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  check_cuda(status, "element mask measurement (count_mask_tiles_kernel)");
  stats.true_entries = static_cast<int64_t>(host[kTrueEntries]);
  stats.nonempty_tiles = static_cast<int64_t>(host[kNonemptyTiles]);
  stats.full_tiles = static_cast<int64_t>(host[kFullTiles]);
  return stats;
}

}  // namespace attnkit::cuda::mask_path
