// The scattered kernels' pre-pass: the union lists (TileLists) of a packed mask, once per call.
//
// Algorithm. One warp per (mask slice, group of 16 or 8 rows, tile of Tile columns), grid-stride over all
// of them: the warp loads the tile's mask words of its group's rows (rows past the last count as empty),
// ORs them into the union of the attended columns, and writes the union's entries (column in the tile |
// row set << 16 for 16-row groups, 32 bits; << 8 for 8-row groups, 16 bits) in column order, padded with
// zero entries to a multiple of 16 (8 for 8-row groups), at the list's fixed slot of Tile entries, and the
// padded length (GatherListBuilder, scattered_gather.cuh). The dK/dV kernel walks 16-row lists (of keys), the
// forward and dQ kernels 8-row lists (of queries). Every list is independent, so the pass is fully parallel and runs
// once per mask slice, while the attention kernels walk each slice's lists once per head and batch element that shares
// it.
//
// Bytes: reads the words, rows * columns / 8 per slice; writes 4 (16-row groups) or 2 (8-row groups) per
// padded union entry and 4 per list. The slots hold 4 bytes per 16 mask elements either way (a quarter of
// a bool mask's own size); only the padded lists are written and read.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_launch.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int kListWarps = 8;

template <int Tile, class Lists>
__global__ void __launch_bounds__(kListWarps * 32)
    build_tile_lists_kernel(const PackedMask mask, typename Lists::EntryType* entries, uint32_t* lengths,
                            int32_t groups, int32_t tiles, int64_t total) {
  constexpr int kGroupRows = Lists::kGroupRows;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t first = int64_t{blockIdx.x} * kListWarps + threadIdx.x / 32;
  for (int64_t index = first; index < total; index += int64_t{gridDim.x} * kListWarps) {
    const int32_t tile = static_cast<int32_t>(index % tiles);
    const int64_t slice_group = index / tiles;
    const int32_t group = static_cast<int32_t>(slice_group % groups);
    const int64_t slice = slice_group / groups;
    const int rows = min(mask.rows - group * kGroupRows, kGroupRows);
    const uint32_t* words = mask.words + (slice * mask.rows + int64_t{group} * kGroupRows) * mask.words_per_row;
    GatherListBuilder<Tile, Lists> builder;
    builder.load_tile(words, mask.words_per_row, rows, tile, lane);
    const int length = builder.build(entries + index * Tile, lane);
    if (lane == 0) lengths[index] = static_cast<uint32_t>(length);
  }
}

template <class Lists>
Lists lists_layout(const PackedMask& mask, int32_t columns, int tile_columns, const typename Lists::EntryType* entries,
                   const uint32_t* lengths) {
  Lists lists;
  lists.entries = entries;
  lists.lengths = lengths;
  lists.groups = (mask.rows + Lists::kGroupRows - 1) / Lists::kGroupRows;
  lists.tiles = (columns + tile_columns - 1) / tile_columns;
  lists.tile_columns = tile_columns;
  lists.mask_batches = mask.mask_batches;
  lists.mask_heads = mask.mask_heads;
  return lists;
}

template <class Lists>
void launch_build_lists(const PackedMask& mask, const Lists& lists, cudaStream_t stream) {
  const int64_t total = int64_t{lists.mask_batches} * lists.mask_heads * lists.groups * lists.tiles;
  if (total == 0) return;
  const int64_t blocks = (total + kListWarps - 1) / kListWarps;
  const int grid = static_cast<int>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  auto* entries = const_cast<typename Lists::EntryType*>(lists.entries);
  auto* lengths = const_cast<uint32_t*>(lists.lengths);
  if (lists.tile_columns == 256) {
    build_tile_lists_kernel<256, Lists>
        <<<grid, kListWarps * 32, 0, stream>>>(mask, entries, lengths, lists.groups, lists.tiles, total);
  } else {
    build_tile_lists_kernel<128, Lists>
        <<<grid, kListWarps * 32, 0, stream>>>(mask, entries, lengths, lists.groups, lists.tiles, total);
  }
  check_launch("build_tile_lists_kernel");
}

}  // namespace

TileLists tile_lists_layout(const PackedMask& mask, int32_t columns, int tile_columns, const uint32_t* entries,
                            const uint32_t* lengths) {
  return lists_layout<TileLists>(mask, columns, tile_columns, entries, lengths);
}

EightRowTileLists eight_row_lists_layout(const PackedMask& mask, int32_t columns, int tile_columns,
                                         const uint16_t* entries, const uint32_t* lengths) {
  return lists_layout<EightRowTileLists>(mask, columns, tile_columns, entries, lengths);
}

void launch_build_tile_lists(const PackedMask& mask, const TileLists& lists, cudaStream_t stream) {
  launch_build_lists(mask, lists, stream);
}

void launch_build_tile_lists(const PackedMask& mask, const EightRowTileLists& lists, cudaStream_t stream) {
  launch_build_lists(mask, lists, stream);
}

}  // namespace attnkit::cuda::sparse
