// The scattered kernels' pre-pass: the union lists (TileLists) of a packed mask, once per call.
//
// Algorithm. One warp per (mask slice, group of 16 rows, tile of Tile columns), grid-stride over all of
// them: the warp loads the tile's mask words of its 16 rows (rows past the last count as empty),
// ORs them into the union of the attended columns, and writes the union's entries (column in the tile |
// row set << 16), padded with empty entries to a multiple of 16 and ordered so that the 8 rows of each
// ldmatrix matrix of the walk fall in different banks where the union allows it, at the list's fixed
// slot of Tile entries, and the padded length (GatherListBuilder, scattered_gather.cuh). Every list is
// independent, so the pass is fully parallel and runs once per mask slice, while the attention kernels
// walk each slice's lists once per head and batch element that shares it.
//
// Bytes: reads the words, rows * columns / 8 per slice; writes 4 per padded union entry and 4 per list.
// The slots hold 4 bytes per 16 mask elements (a quarter of a bool mask's own size); only the padded
// lists are written and read.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_launch.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int kListWarps = 8;

template <int Tile>
__global__ void __launch_bounds__(kListWarps * 32)
    build_tile_lists_kernel(const PackedMask mask, uint32_t* entries, uint32_t* lengths, int32_t groups, int32_t tiles,
                            int64_t total) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t first = int64_t{blockIdx.x} * kListWarps + threadIdx.x / 32;
  for (int64_t index = first; index < total; index += int64_t{gridDim.x} * kListWarps) {
    const int32_t tile = static_cast<int32_t>(index % tiles);
    const int64_t slice_group = index / tiles;
    const int32_t group = static_cast<int32_t>(slice_group % groups);
    const int64_t slice = slice_group / groups;
    const int rows = min(mask.rows - group * 16, 16);
    const uint32_t* words = mask.words + (slice * mask.rows + int64_t{group} * 16) * mask.words_per_row;
    GatherListBuilder<Tile> builder;
    builder.load_tile(words, mask.words_per_row, rows, tile, lane);
    const int length = builder.build(entries + index * Tile, lane);
    if (lane == 0) lengths[index] = static_cast<uint32_t>(length);
  }
}

}  // namespace

TileLists tile_lists_layout(const PackedMask& mask, int32_t columns, int tile_columns, const uint32_t* entries,
                            const uint32_t* lengths) {
  TileLists lists;
  lists.entries = entries;
  lists.lengths = lengths;
  lists.groups = (mask.rows + 15) / 16;
  lists.tiles = (columns + tile_columns - 1) / tile_columns;
  lists.tile_columns = tile_columns;
  lists.mask_batches = mask.mask_batches;
  lists.mask_heads = mask.mask_heads;
  return lists;
}

void launch_build_tile_lists(const PackedMask& mask, const TileLists& lists, cudaStream_t stream) {
  const int64_t total = int64_t{lists.mask_batches} * lists.mask_heads * lists.groups * lists.tiles;
  if (total == 0) return;
  const int64_t blocks = (total + kListWarps - 1) / kListWarps;
  const int grid = static_cast<int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  auto* entries = const_cast<uint32_t*>(lists.entries);
  auto* lengths = const_cast<uint32_t*>(lists.lengths);
  if (lists.tile_columns == 256) {
    build_tile_lists_kernel<256>
        <<<grid, kListWarps * 32, 0, stream>>>(mask, entries, lengths, lists.groups, lists.tiles, total);
  } else {
    build_tile_lists_kernel<128>
        <<<grid, kListWarps * 32, 0, stream>>>(mask, entries, lengths, lists.groups, lists.tiles, total);
  }
  check_launch("build_tile_lists_kernel");
}

}  // namespace attnkit::cuda::sparse
