// The gathering half of the scattered kernels, shared by the forward, dQ and dK/dV kernels, and the
// union-list builder of the pre-pass (scattered_tile_lists.cu).
//
// A warp owns 16 rows (queries, or keys in the dK/dV kernel); its CTA streams the other side (the
// "columns") in tiles of Tile columns staged in shared memory. The pre-pass ORs the mask words of every
// group of 16 rows into the union of the columns any of them attends, per tile, and writes that union
// as a list of entries (column in the tile | 16-bit row set << 16), padded with empty entries to a
// multiple of 16 (TileLists). A mask slice shared by several heads or batch elements is listed once,
// however many CTAs walk it. The kernels copy each tile's list next to the staged tile and walk it 16
// entries at a time: ldmatrix reads the listed columns' rows straight out of the staged tile (each lane
// supplies one gathered row address), and the row set tells which of the 16 x 16 products are real.
// Work per tile therefore follows the union, not the tile. The dK/dV kernel walks such 16-row lists; the
// forward and dQ kernels walk the unions of groups of 8 query rows instead (EightRowTileLists,
// scattered_group_steps.cuh): two per warp, with the listed keys as the MMA's M dimension.
//
// Staged tiles are [Tile][Width] elements, 16-byte chunks XOR-swizzled by the row (chunk ^ row % 8) so
// that gathered rows with different row % 8 fall in different banks.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/sparse/scattered_fragments.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

inline constexpr unsigned kFullWarp = 0xffffffffu;

template <int Width>
struct StagedTile {
  static constexpr int kChunks = Width / 8;  // 16-byte chunks per row
  static constexpr int kSwizzle = (kChunks < 8 ? kChunks : 8) - 1;
  // Element offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static int chunk_offset(int row, int chunk) {
    return row * Width + ((chunk ^ (row & kSwizzle)) << 3);
  }
};

// Issues the cp.async copies of tokens first .. first + Tile - 1 of head `head` (zero past `tokens` and
// past `columns`). Each thread copies one 16-byte chunk column of rows kRowsPerPass apart; that distance
// is a multiple of the swizzle period, so its shared offsets step by a constant, and with collapsed
// token dims so do its global addresses.
template <class Element, int Width, int Tile, int Threads>
__device__ __forceinline__ void stage_tile_async(Element* tile, const SequenceTensor& tensor, int32_t batch,
                                                 int32_t head, int32_t first, int32_t tokens, int32_t columns,
                                                 int thread) {
  constexpr int kChunks = StagedTile<Width>::kChunks;
  constexpr int kRowsPerPass = Threads / kChunks;
  static_assert(Threads % kChunks == 0 && Tile % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "tile loader shape");
  const int chunk = thread % kChunks;
  const int first_row = thread / kChunks;
  const bool column_valid = chunk * 8 < columns;
  const Element* base = static_cast<const Element*>(tensor.data);
  const uint32_t destination = shared_address(tile + StagedTile<Width>::chunk_offset(first_row, chunk));
  constexpr uint32_t kPassBytes = kRowsPerPass * Width * sizeof(Element);
  if (tensor.token_dims == 1) {
    const int64_t stride = tensor.token_stride[0];
    const Element* source = base + int64_t{batch} * tensor.batch_stride + int64_t{head} * tensor.head_stride +
                            int64_t{first + first_row} * stride + chunk * 8;
#pragma unroll
    for (int pass = 0; pass < Tile / kRowsPerPass; ++pass) {
      const bool valid = column_valid && first + first_row + pass * kRowsPerPass < tokens;
      copy_16_bytes_async(destination + pass * kPassBytes, valid ? source : base, valid);
      source += kRowsPerPass * stride;
    }
  } else {
#pragma unroll 2
    for (int pass = 0; pass < Tile / kRowsPerPass; ++pass) {
      const int32_t token = first + first_row + pass * kRowsPerPass;
      const bool valid = column_valid && token < tokens;
      const Element* source = valid ? base + tensor.offset(batch, token, head) + chunk * 8 : base;
      copy_16_bytes_async(destination + pass * kPassBytes, source, valid);
    }
  }
}

// Stages K and V rows first .. first + Tile - 1 of KV head `kv_head` (the forward's and the dQ kernel's
// tiles): K at `k_tile`, V right after it.
template <class Element, int Width, int Tile, int Threads, class Params>
__device__ __forceinline__ void stage_key_value_async(Element* k_tile, const Params& p, int32_t batch, int32_t kv_head,
                                                      int32_t first, int thread) {
  stage_tile_async<Element, Width, Tile, Threads>(k_tile, p.k, batch, kv_head, first, p.seq_k, p.head_dim, thread);
  stage_tile_async<Element, Width, Tile, Threads>(k_tile + Tile * Width, p.v, batch, kv_head, first, p.seq_k,
                                                  p.head_dim_v, thread);
}

// Copies `Tile` floats of a workspace row (zero past `count`) into shared memory.
template <int Tile, int Threads>
__device__ __forceinline__ void stage_floats_async(float* tile, const float* row, int32_t first, int32_t count,
                                                   int thread) {
  for (int i = thread; i < Tile / 4; i += Threads) {
    const bool valid = first + 4 * i < count;
    copy_16_bytes_async(shared_address(tile + 4 * i), valid ? row + first + 4 * i : row, valid);
  }
}

// A warp's gather list for one tile (see the file comment), built by the pre-pass for a group of
// Lists::kGroupRows rows (16 or 8): load() reads the tile's words of the group's rows into registers (rows
// past `rows` and words past `valid_words` count as empty), build() writes the list (at most Tile entries
// of Lists::EntryType) and returns its length, a multiple of Lists::kPadding.
template <int Tile, class Lists = TileLists>
struct GatherListBuilder {
  using Entry = typename Lists::EntryType;
  static constexpr int kGroupRows = Lists::kGroupRows;
  static constexpr int kWords = Tile / 32;
  static constexpr int kLanesPerWord = 32 / kWords;
  static constexpr int kRowsPerLane = kGroupRows / kLanesPerWord;
  static_assert(kWords * kLanesPerWord == 32 && kLanesPerWord * kRowsPerLane == kGroupRows,
                "tile of 128 or 256 columns, groups of 8 or 16 rows");

  uint32_t row_words[kRowsPerLane];

  // `words` points at the tile's first mask word of the warp's first row.
  __device__ __forceinline__ void load(const uint32_t* words, int32_t words_per_row, int rows, int valid_words,
                                       int lane) {
    const int word = lane / kLanesPerWord;
    const int group_lane = lane % kLanesPerWord;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      const int row = group_lane * kRowsPerLane + i;
      row_words[i] = row < rows && word < valid_words ? words[int64_t{row} * words_per_row + word] : 0u;
    }
  }

  // load() of tile `tile` of a mask whose rows hold `words_per_row` words; `words` points at the first
  // word of the warp's first row.
  __device__ __forceinline__ void load_tile(const uint32_t* words, int32_t words_per_row, int rows, int tile,
                                            int lane) {
    load(words + tile * kWords, words_per_row, rows, words_per_row - tile * kWords, lane);
  }

  __device__ __forceinline__ int build(Entry* list, int lane) const {
    const int word = lane / kLanesPerWord;
    const int group_lane = lane % kLanesPerWord;
    uint32_t any = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) any |= row_words[i];
#pragma unroll
    for (int offset = 1; offset < kLanesPerWord; offset <<= 1) any |= __shfl_xor_sync(kFullWarp, any, offset);
    const int count = __popc(any);
    int end = count;  // inclusive scan over the words
#pragma unroll
    for (int offset = kLanesPerWord; offset < 32; offset <<= 1) {
      const int before = __shfl_up_sync(kFullWarp, end, offset);
      if (lane >= offset) end += before;
    }
    const int total = __shfl_sync(kFullWarp, end, 31);
    const unsigned group = ((1u << kLanesPerWord) - 1u) << (word * kLanesPerWord);
    int position = end - count;
    uint32_t rest = any;
    while (rest != 0) {  // the same trip count in every lane of the group
      const int bit = __ffs(rest) - 1;
      rest &= rest - 1;
      uint32_t row_set = 0;
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        row_set |= ((row_words[i] >> bit) & 1u) << (group_lane * kRowsPerLane + i);
      }
#pragma unroll
      for (int offset = 1; offset < kLanesPerWord; offset <<= 1) row_set |= __shfl_xor_sync(group, row_set, offset);
      if (group_lane == 0) {
        list[position] = static_cast<Entry>((row_set << Lists::kRowSetShift) | static_cast<uint32_t>(word * 32 + bit));
      }
      ++position;
    }
    constexpr int kPadding = Lists::kPadding;
    const int padded = (total + kPadding - 1) & ~(kPadding - 1);
    if (lane < kPadding && total + lane < padded) list[total + lane] = Entry{0};
    __syncwarp();
    return padded;
  }
};

// The tile pipeline of every scattered kernel: `items` tiles, each staged by stage(item) (cp.async into
// stage item % 2) only when some warp of the CTA has a nonempty list for it (a CTA-wide OR, so structured
// masks skip whole tiles for free), then walk(item, lists, length) over the warp's lists of the tile.
// length_of(item) is nonzero when the warp has work in the tile; copy_list(item, length, destination)
// issues the cp.async copies of the warp's lists of the tile into its list buffer item % 2 of `lists`
// ([2][Tile] words at shared address `destination`), in the same copy group as the tile. One barrier per
// tile (with the OR of the next tile's lengths) publishes tile `item` and frees the stage and list buffers
// of tile item - 1, which the copies of tile item + 1, issued right after it, overwrite while tile `item`
// is walked. List lengths are read two tiles ahead, so their latency hides behind a walk.
template <int Tile, class Stage, class LengthOf, class CopyList, class Walk>
__device__ __forceinline__ void stream_tiles_and_lists(int items, uint32_t* lists, const Stage& stage,
                                                       const LengthOf& length_of, const CopyList& copy_list,
                                                       const Walk& walk) {
  auto buffer = [&](int item) { return lists + (item & 1) * Tile; };
  int current = items > 0 ? length_of(0) : 0;
  int next = items > 1 ? length_of(1) : 0;
  bool current_needed = __syncthreads_or(current != 0) != 0;
  if (current_needed) stage(0);
  if (current != 0) copy_list(0, current, shared_address(buffer(0)));
  commit_async_copies();
  for (int item = 0; item < items; ++item) {
    wait_async_copies<0>();
    const bool next_needed = __syncthreads_or(next != 0) != 0;
    if (next_needed) stage(item + 1);
    if (next != 0) copy_list(item + 1, next, shared_address(buffer(item + 1)));
    commit_async_copies();
    const int length = current;
    current = next;
    next = item + 2 < items ? length_of(item + 2) : 0;
    if (current_needed) walk(item, buffer(item), length);  // otherwise every warp's list is empty
    current_needed = next_needed;
  }
}

// stream_tiles_and_lists for one list of 32-bit entries per warp and tile (entries_of(item), length_of(item)
// entries, 16-byte aligned).
template <int Tile, class Stage, class LengthOf, class EntriesOf, class Walk>
__device__ __forceinline__ void stream_listed_tiles(int items, uint32_t* lists, int lane, const Stage& stage,
                                                    const LengthOf& length_of, const EntriesOf& entries_of,
                                                    const Walk& walk) {
  auto copy_list = [&](int item, int length, uint32_t destination) {
    const uint32_t* source = entries_of(item);
    for (int chunk = lane; chunk * 4 < length; chunk += 32) {
      copy_16_bytes_async(destination + chunk * 16, source + chunk * 4, true);
    }
  };
  stream_tiles_and_lists<Tile>(items, lists, stage, length_of, copy_list, walk);
}

// Shared byte address of chunk `chunk` of the gathered row named by list entry `entry`.
template <class Element, int Width>
__device__ __forceinline__ uint32_t gathered_row_address(uint32_t tile_address, uint32_t entry, int chunk) {
  const int row = static_cast<int>(entry & 0xffffu);
  return tile_address + static_cast<uint32_t>(StagedTile<Width>::chunk_offset(row, chunk) * int(sizeof(Element)));
}

// S(16 rows x 16 listed columns) += A(16 x Width) * B^T where B's listed rows sit in a staged tile:
// n-block 0 holds list entries 0..7 of the step, n-block 1 entries 8..15.
template <class Element, int Width>
__device__ __forceinline__ void gathered_scores(float (&s)[2][4], const uint32_t (&a)[Width / 16][4],
                                                uint32_t tile_address, const uint32_t* step_list, int lane) {
#pragma unroll
  for (int block = 0; block < 2; ++block) {
    const uint32_t entry = step_list[block * 8 + (lane & 7)];
#pragma unroll
    for (int pass = 0; pass < Width / 32; ++pass) {
      uint32_t b[4];
      load_matrix_x4(b, gathered_row_address<Element, Width>(tile_address, entry, pass * 4 + (lane >> 3)));
      mma_16816<Element>(s[block], a[2 * pass], b[0], b[1]);
      mma_16816<Element>(s[block], a[2 * pass + 1], b[2], b[3]);
    }
  }
}

// Calls f(block, i, entry, attended) for each of the lane's 8 values of a step's 16 x 16 S (n-block
// `block`, C register i): `entry` is the list entry of the value's column, `attended` whether the value's
// row is in that entry's row set.
template <class F>
__device__ __forceinline__ void for_each_step_entry(const uint32_t* step_list, int lane, const F& f) {
  const int g = lane / 4;
  const int t = lane % 4;
#pragma unroll
  for (int block = 0; block < 2; ++block) {
    const uint2 entries = *reinterpret_cast<const uint2*>(step_list + block * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t entry = (i & 1) ? entries.y : entries.x;
      const bool attended = (entry >> (16 + g + (i >> 1) * 8)) & 1u;
      f(block, i, entry, attended);
    }
  }
}

// C(16 x Width) += P(16 x 16 listed columns, an A fragment) * B where B's listed rows sit in a staged tile.
template <class Element, int Width>
__device__ __forceinline__ void gathered_accumulate(float (&c)[Width / 8][4], const uint32_t (&p)[4],
                                                    uint32_t tile_address, const uint32_t* step_list, int lane) {
  const uint32_t entry = step_list[(lane & 7) + ((lane >> 3) & 1) * 8];
#pragma unroll
  for (int pair = 0; pair < Width / 16; ++pair) {
    uint32_t b[4];
    load_matrix_x4_transposed(b, gathered_row_address<Element, Width>(tile_address, entry, 2 * pair + (lane >> 4)));
    mma_16816<Element>(c[2 * pair], p, b[0], b[1]);
    mma_16816<Element>(c[2 * pair + 1], p, b[2], b[3]);
  }
}

}  // namespace attnkit::cuda::sparse
