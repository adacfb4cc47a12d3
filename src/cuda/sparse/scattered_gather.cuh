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
// Work per tile therefore follows the union, not the tile.
//
// Within a step of 16 entries, n-block b of the score product (its 8 columns, one ldmatrix matrix, and
// the matching k rows of the P V product) is entries 4 j + 2 b + {0, 1}, j = 0..3 (step_entry_of_row), so
// that the lane holding C columns 2t, 2t + 1 of both n-blocks reads its four entries 4t .. 4t + 3 with
// one 16-byte load (StepEntries).
//
// Staged tiles are [Tile][Width] elements, 16-byte chunks XOR-swizzled by the row (chunk ^ row % 8), so
// the 8 rows of one ldmatrix matrix (one n-block's 8 entries) read conflict-free when their columns
// differ mod 8 and pay one extra shared-memory wavefront per repeated residue otherwise. The list order
// is chosen for that (any order gives the same sums): the union's n columns sorted by (column % 8,
// column) are dealt round robin over the G = padded / 8 n-blocks of the list (the i-th sorted column
// becomes row i / G of n-block i % G: n-block h is n-block h % 2 of step h / 2), so two columns of one
// n-block share a residue only when that residue holds more than G columns; an n-block's padding entries
// name its row-0 column with an empty row set (the same address: a broadcast, not a conflict), an
// n-block without columns names column 0.
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

// Index within a 16-entry step of the entry that is row `row` (0..7) of n-block `block` (see the file
// comment): the C columns 2t, 2t + 1 of n-block b are entries 4t + 2b, 4t + 2b + 1.
__device__ __forceinline__ constexpr int step_entry_of_row(int row, int block) {
  return (row >> 1) * 4 + (row & 1) + 2 * block;
}

// The entries of one step a lane uses, read once: `columns` those of its C columns (x, y: n-block 0
// columns 2t, 2t + 1; z, w: n-block 1), `rows[b]` the one whose row it supplies to n-block b's ldmatrix
// matrix (row lane % 8).
struct StepEntries {
  uint4 columns;
  uint32_t rows[2];
};

__device__ __forceinline__ StepEntries load_step_entries(const uint32_t* step_list, int lane) {
  StepEntries e;
  e.columns = *reinterpret_cast<const uint4*>(step_list + 4 * (lane % 4));
  e.rows[0] = step_list[step_entry_of_row(lane & 7, 0)];
  e.rows[1] = step_list[step_entry_of_row(lane & 7, 1)];
  return e;
}

// A warp's gather list for one tile (see the file comment), built by the pre-pass: load() reads the
// tile's words of the 16 rows into registers (rows past `rows` and words past `valid_words` count as
// empty), build() writes the list (at most Tile entries, in the residue-dealt order of the file comment)
// and returns its length, a multiple of 16.
template <int Tile>
struct GatherListBuilder {
  static constexpr int kWords = Tile / 32;
  static constexpr int kLanesPerWord = 32 / kWords;
  static constexpr int kRowsPerLane = 16 / kLanesPerWord;
  static_assert(kWords * kLanesPerWord == 32 && kLanesPerWord * kRowsPerLane == 16, "tile of 128 or 256 columns");

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

  // Bit r of every byte: the word's columns with residue r mod 8 are (kResidue0 << r).
  static constexpr uint32_t kResidue0 = 0x01010101u;

  __device__ __forceinline__ int build(uint32_t* list, int lane) const {
    const int group_lane = lane % kLanesPerWord;
    uint32_t any = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) any |= row_words[i];
#pragma unroll
    for (int offset = 1; offset < kLanesPerWord; offset <<= 1) any |= __shfl_xor_sync(kFullWarp, any, offset);
    // Union columns of this word per residue, a byte each: residues 0-3 in `low`, 4-7 in `high` (a byte
    // never exceeds Tile / 8 = 32).
    uint32_t low = 0;
    uint32_t high = 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      low |= static_cast<uint32_t>(__popc(any & (kResidue0 << r))) << (8 * r);
      high |= static_cast<uint32_t>(__popc(any & (kResidue0 << (r + 4)))) << (8 * r);
    }
    uint32_t low_end = low;  // inclusive scans over the words, bytewise
    uint32_t high_end = high;
#pragma unroll
    for (int offset = kLanesPerWord; offset < 32; offset <<= 1) {
      const uint32_t low_before = __shfl_up_sync(kFullWarp, low_end, offset);
      const uint32_t high_before = __shfl_up_sync(kFullWarp, high_end, offset);
      if (lane >= offset) {
        low_end += low_before;
        high_end += high_before;
      }
    }
    const uint32_t low_total = __shfl_sync(kFullWarp, low_end, 31);
    const uint32_t high_total = __shfl_sync(kFullWarp, high_end, 31);
    const uint32_t low_sum = (low_total * kResidue0) >> 24;
    const int total = static_cast<int>(low_sum + ((high_total * kResidue0) >> 24));
    const int padded = (total + 15) & ~15;
    if (padded == 0) return 0;
    const int groups = padded / 8;
    // Byte r: the sorted rank of this word's first column of residue r (columns of lower residues, then
    // this residue's columns in earlier words). A byte can reach 256 only when every union column precedes
    // it; its carry then lands in the bytes of residues without columns, which are never read.
    const uint32_t low_first = low_total * 0x01010100u + (low_end - low);
    const uint32_t high_first = high_total * 0x01010100u + low_sum * kResidue0 + (high_end - high);
    const int word_base = (lane / kLanesPerWord) * 32;
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
      for (int offset = 1; offset < kLanesPerWord; offset <<= 1) {
        row_set |= __shfl_xor_sync(((1u << kLanesPerWord) - 1u) << (lane - group_lane), row_set, offset);
      }
      const int residue = bit & 7;
      const uint32_t firsts = residue < 4 ? low_first : high_first;
      const int rank = static_cast<int>((firsts >> (8 * (residue & 3))) & 0xffu) +
                       __popc(any & (kResidue0 << residue) & ((1u << bit) - 1u));
      if (group_lane == 0) {
        list[block_entry(rank % groups, rank / groups)] = (row_set << 16) | static_cast<uint32_t>(word_base + bit);
      }
    }
    __syncwarp();
    for (int slot = lane; slot < padded; slot += 32) {
      const int block = slot / 8;
      const int filled = block < total ? (total - block + groups - 1) / groups : 0;
      if (slot % 8 >= filled) {
        list[block_entry(block, slot % 8)] = filled > 0 ? list[block_entry(block, 0)] & 0xffffu : 0u;
      }
    }
    __syncwarp();
    return padded;
  }

  // List index of row `row` of n-block `block` (n-block block % 2 of step block / 2).
  __device__ __forceinline__ static int block_entry(int block, int row) {
    return (block >> 1) * 16 + step_entry_of_row(row, block & 1);
  }
};

// A warp copies `length` entries of a list (a multiple of 4, 16-byte aligned) into `buffer` with cp.async,
// in the calling thread's current copy group.
__device__ __forceinline__ void copy_list_async(uint32_t* buffer, const uint32_t* source, int length, int lane) {
  const uint32_t destination = shared_address(buffer);
  for (int chunk = lane; chunk * 4 < length; chunk += 32) {
    copy_16_bytes_async(destination + chunk * 16, source + chunk * 4, true);
  }
}

// The tile pipeline of every scattered kernel: `items` tiles, each staged by stage(item) (cp.async into
// stage item % 2) only when some warp of the CTA has a nonempty list for it (a CTA-wide OR, so structured
// masks skip whole tiles for free), then walk(item, list, length) over the warp's list of the tile. The
// warp copies its list (entries_of(item), length_of(item) entries, 16-byte aligned) with cp.async into its
// list buffer item % 2 of `lists` ([2][Tile] entries), in the same copy group as the tile. One barrier
// per tile (with the OR of the next tile's lengths) publishes tile `item` and frees the stage and list
// buffers of tile item - 1, which the copies of tile item + 1, issued right after it, overwrite while
// tile `item` is walked. List lengths are read two tiles ahead, so their latency hides behind a walk.
template <int Tile, class Stage, class LengthOf, class EntriesOf, class Walk>
__device__ __forceinline__ void stream_listed_tiles(int items, uint32_t* lists, int lane, const Stage& stage,
                                                    const LengthOf& length_of, const EntriesOf& entries_of,
                                                    const Walk& walk) {
  auto copy_list = [&](int item, int length) {
    copy_list_async(lists + (item & 1) * Tile, entries_of(item), length, lane);
  };
  int current = items > 0 ? length_of(0) : 0;
  int next = items > 1 ? length_of(1) : 0;
  bool current_needed = __syncthreads_or(current > 0) != 0;
  if (current_needed) stage(0);
  if (current > 0) copy_list(0, current);
  commit_async_copies();
  for (int item = 0; item < items; ++item) {
    wait_async_copies<0>();
    const bool next_needed = __syncthreads_or(next > 0) != 0;
    if (next_needed) stage(item + 1);
    if (next > 0) copy_list(item + 1, next);
    commit_async_copies();
    const int length = current;
    current = next;
    next = item + 2 < items ? length_of(item + 2) : 0;
    if (current_needed) walk(item, lists + (item & 1) * Tile, length);  // otherwise every warp's list is empty
    current_needed = next_needed;
  }
}

// Calls step(entries) for every 16 entries of a list of `length` entries (a multiple of 16), the next
// step's entries loaded before the current step runs (unconditionally: the last step reloads its own,
// so the loop body has no branch around the loads).
template <class Step>
__device__ __forceinline__ void walk_steps(const uint32_t* list, int length, int lane, const Step& step) {
  if (length == 0) return;
  StepEntries entries = load_step_entries(list, lane);
  for (int offset = 16; offset <= length; offset += 16) {
    const StepEntries current = entries;
    entries = load_step_entries(list + min(offset, length - 16), lane);
    step(current);
  }
}

// The pipeline of the forward and dQ kernels: streams the K and V tiles of KV head `kv_head` through
// two stages at `tiles` ([stage][K, V][Tile][Width], stream_listed_tiles) and calls
// step(k_address, v_address, entries) for every 16 entries of the warp's list of each walked tile.
// The warp's rows are group `group` of the query-major lists of (batch, head); a group past the last
// row has empty lists.
template <class Element, int Width, int Tile, int Threads, class Params, class Step>
__device__ __forceinline__ void stream_key_value_steps(Element* tiles, uint32_t* lists, const Params& p, int32_t batch,
                                                       int32_t head, int32_t kv_head, int32_t group, int thread,
                                                       int lane, const Step& step) {
  constexpr int kTileElements = Tile * Width;
  auto stage = [&](int tile) {
    stage_key_value_async<Element, Width, Tile, Threads>(tiles + (tile & 1) * 2 * kTileElements, p, batch, kv_head,
                                                         tile * Tile, thread);
  };
  const int tiles_k = (p.seq_k + Tile - 1) / Tile;
  const bool has_rows = group < p.lists.groups;
  const int64_t first_list = has_rows ? p.lists.index(batch, head, group, 0) : 0;
  auto length_of = [&](int tile) { return has_rows ? static_cast<int>(p.lists.lengths[first_list + tile]) : 0; };
  auto entries_of = [&](int tile) { return p.lists.entries + (first_list + tile) * Tile; };
  auto walk = [&](int tile, const uint32_t* list, int length) {
    const uint32_t k_address = shared_address(tiles + (tile & 1) * 2 * kTileElements);
    const uint32_t v_address = k_address + kTileElements * int(sizeof(Element));
    walk_steps(list, length, lane, [&](const StepEntries& entries) { step(k_address, v_address, entries); });
  };
  stream_listed_tiles<Tile>(tiles_k, lists, lane, stage, length_of, entries_of, walk);
}

// Shared byte address of chunk `chunk` of the gathered row named by list entry `entry`. The swizzle XORs
// the chunk index, so for chunks c and c ^ d with disjoint bits the addresses differ by XOR 16 d bytes
// (staged tiles start at multiples of their row size); the walk computes one address per row and XORs it.
template <class Element, int Width>
__device__ __forceinline__ uint32_t gathered_row_address(uint32_t tile_address, uint32_t entry, int chunk) {
  const int row = static_cast<int>(entry & 0xffffu);
  return tile_address + static_cast<uint32_t>(StagedTile<Width>::chunk_offset(row, chunk) * int(sizeof(Element)));
}

// S(16 rows x 16 listed columns) += A(16 x Width) * B^T where B's listed rows sit in a staged tile
// (n-block b: the step's entries step_entry_of_row(0..7, b)).
template <class Element, int Width>
__device__ __forceinline__ void gathered_scores(float (&s)[2][4], const uint32_t (&a)[Width / 16][4],
                                                uint32_t tile_address, const StepEntries& entries, int lane) {
#pragma unroll
  for (int block = 0; block < 2; ++block) {
    const uint32_t first = gathered_row_address<Element, Width>(tile_address, entries.rows[block], lane >> 3);
#pragma unroll
    for (int pass = 0; pass < Width / 32; ++pass) {
      uint32_t b[4];
      load_matrix_x4(b, first ^ static_cast<uint32_t>(pass * 64));  // chunk pass * 4 + lane / 8
      mma_16816<Element>(s[block], a[2 * pass], b[0], b[1]);
      mma_16816<Element>(s[block], a[2 * pass + 1], b[2], b[3]);
    }
  }
}

// Calls f(block, i, attended) for each of the lane's 8 values of a step's 16 x 16 S (n-block `block`, C
// register i; its column's entry is StepEntries::columns' x / y (n-block 0) or z / w, by i % 2): `attended`
// whether the value's row is in that entry's row set.
template <class F>
__device__ __forceinline__ void for_each_step_entry(const StepEntries& entries, int lane, const F& f) {
  const int g = lane / 4;
#pragma unroll
  for (int block = 0; block < 2; ++block) {
    const uint32_t even = block == 0 ? entries.columns.x : entries.columns.z;
    const uint32_t odd = block == 0 ? entries.columns.y : entries.columns.w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t entry = (i & 1) ? odd : even;
      const bool attended = (entry >> (16 + g + (i >> 1) * 8)) & 1u;
      f(block, i, attended);
    }
  }
}

// C(16 x Width) += P(16 x 16 listed columns, an A fragment) * B where B's listed rows sit in a staged tile.
template <class Element, int Width>
__device__ __forceinline__ void gathered_accumulate(float (&c)[Width / 8][4], const uint32_t (&p)[4],
                                                    uint32_t tile_address, const StepEntries& entries, int lane) {
  const uint32_t entry = (lane & 8) != 0 ? entries.rows[1] : entries.rows[0];  // k rows 8..15: n-block 1's
  const uint32_t first = gathered_row_address<Element, Width>(tile_address, entry, lane >> 4);
#pragma unroll
  for (int pair = 0; pair < Width / 16; ++pair) {
    uint32_t b[4];
    load_matrix_x4_transposed(b, first ^ static_cast<uint32_t>(pair * 32));  // chunk 2 pair + lane / 16
    mma_16816<Element>(c[2 * pair], p, b[0], b[1]);
    mma_16816<Element>(c[2 * pair + 1], p, b[2], b[3]);
  }
}

}  // namespace attnkit::cuda::sparse
