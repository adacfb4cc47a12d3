// Packs a bool element mask key-major (mask_bits_by_key.hpp): reads every mask byte once (rows * columns bytes per
// slice) and writes columns * ceil(rows / 32) words per slice, an eighth of that.
//
// A CTA of 4 warps takes a tile of 32 * Words query rows x 128 keys. It stages the tile's bytes in shared memory with
// coalesced 16-byte loads (a warp reads 4 rows x 128 consecutive bytes; rows whose chunk is not 16-byte aligned, not
// contiguous or cut by the last key take a byte path), zeros past the queries and keys. Then warp j turns keys
// 32j..32j+31 into words: lane r reads row r's 32 bytes (a 144-byte shared row pitch keeps each quarter warp's 16-byte
// reads on distinct banks) and 32 ballots give the 32 words, lane i keeping key i's. With Words = 4 (when the words
// are 16-byte aligned and the grid still has many CTAs) each lane stores its key's 4 consecutive words as one 16-byte
// store, else one word: 32 lanes store 32 keys' words, ceil(rows / 32) words apart.
#include "cuda/common/mask_bits_by_key.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace attnkit::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kKeys = 128;                 // per tile: one 32-key group per warp
constexpr int kChunksPerRow = kKeys / 16;  // 16-byte chunks
constexpr int kRowPitch = kChunksPerRow + 1;
// Tiles of 4 query words only when the grid keeps this many CTAs (one slice of S = 4096 has 1024).
constexpr int64_t kWideTileMinCtas = 1024;

// The 16 bytes of `row` from key `key` on (zero past `columns`).
__device__ __forceinline__ uint4 load_chunk(const uint8_t* row, int64_t key_stride, int32_t key, int32_t columns) {
  const uint8_t* first = row + key * key_stride;
  if (key_stride == 1 && key + 16 <= columns && reinterpret_cast<uintptr_t>(first) % 16 == 0) {
    return __ldg(reinterpret_cast<const uint4*>(first));
  }
  uint32_t part[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (key + i < columns) part[i / 4] |= uint32_t{__ldg(first + i * key_stride)} << (8 * (i % 4));
  }
  return make_uint4(part[0], part[1], part[2], part[3]);
}

template <int Words>
__global__ void __launch_bounds__(kThreads)
    mask_bits_by_key_kernel(const MaskBytes m, uint32_t* words, int64_t tiles, int32_t key_tiles) {
  static_assert(Words == 1 || Words == 4, "one word per lane, or four stored as one 16-byte vector");
  constexpr int kRows = 32 * Words;
  constexpr int kLoads = kRows * kChunksPerRow / kThreads;
  __shared__ uint4 staged[kRows][kRowPitch];
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int lane = thread % 32;
  const int32_t query_words = query_bit_words(m.rows);
  const int64_t total = tiles * m.batches * m.heads;
  for (int64_t index = blockIdx.x; index < total; index += gridDim.x) {
    const int64_t slice = index / tiles;
    const int32_t key0 = static_cast<int32_t>(index % tiles % key_tiles) * kKeys;
    const int32_t word0 = static_cast<int32_t>(index % tiles / key_tiles) * Words;
    const uint8_t* slice_bytes = m.data + (slice / m.heads) * m.stride[0] + (slice % m.heads) * m.stride[1];
    uint4 chunk[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int e = thread + i * kThreads;
      const int32_t query = word0 * 32 + e / kChunksPerRow;
      const int32_t key = key0 + e % kChunksPerRow * 16;
      chunk[i] = query < m.rows && key < m.columns
                     ? load_chunk(slice_bytes + query * m.stride[2], m.stride[3], key, m.columns)
                     : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int e = thread + i * kThreads;
      staged[e / kChunksPerRow][e % kChunksPerRow] = chunk[i];
    }
    __syncthreads();
    uint32_t bits[Words];
#pragma unroll
    for (int w = 0; w < Words; ++w) {
      const uint4 lo = staged[32 * w + lane][2 * warp];
      const uint4 hi = staged[32 * w + lane][2 * warp + 1];
      const uint32_t part[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      bits[w] = 0;
#pragma unroll
      for (int b = 0; b < 32; ++b) {
        const uint32_t column = __ballot_sync(0xffffffffu, (part[b / 4] & (0xffu << (8 * (b % 4)))) != 0u);
        if (lane == b) bits[w] = column;
      }
    }
    const int32_t key = key0 + 32 * warp + lane;
    if (key < m.columns) {
      uint32_t* out = words + (slice * m.columns + key) * query_words + word0;
      if constexpr (Words == 4) {
        *reinterpret_cast<uint4*>(out) = make_uint4(bits[0], bits[1], bits[2], bits[3]);
      } else {
        *out = bits[0];
      }
    }
    __syncthreads();  // before the next tile overwrites `staged`
  }
}

template <int Words>
void launch(const MaskBytes& mask, uint32_t* words, int64_t slices, int32_t key_tiles, cudaStream_t stream) {
  const int64_t tiles = int64_t{key_tiles} * ((query_bit_words(mask.rows) + Words - 1) / Words);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles * slices, int64_t{1} << 30));
  mask_bits_by_key_kernel<Words><<<grid, kThreads, 0, stream>>>(mask, words, tiles, key_tiles);
}

}  // namespace

cudaError_t launch_mask_bits_by_key(const MaskBytes& mask, uint32_t* words, cudaStream_t stream) {
  const int64_t slices = int64_t{mask.batches} * mask.heads;
  if (slices == 0 || mask.rows == 0 || mask.columns == 0) return cudaSuccess;
  const int32_t key_tiles = (mask.columns + kKeys - 1) / kKeys;
  const int32_t query_words = query_bit_words(mask.rows);
  const bool wide = query_words % 4 == 0 && reinterpret_cast<uintptr_t>(words) % 16 == 0 &&
                    slices * key_tiles * (query_words / 4) >= kWideTileMinCtas;
  if (wide) {
    launch<4>(mask, words, slices, key_tiles, stream);
  } else {
    launch<1>(mask, words, slices, key_tiles, stream);
  }
  return cudaGetLastError();
}

}  // namespace attnkit::cuda
