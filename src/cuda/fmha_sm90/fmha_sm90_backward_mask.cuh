// Element masks of partial visits in the Hopper dK/dV kernel.
//
// Box visits (no / causal / neighborhood masks): from two tables the MMA warpgroups build once per CTA
// instead of testing each (key, query) pair against the query's window per visit.
//
// Per dimension, a query i sees keys [begin(i), end(i)) with begin and end non-decreasing in i, so the
// queries that see key k are one range [first i with end(i) > k, first i with begin(i) > k) — two
// binary searches (first_query_past, tile_range_inverse.hpp), empty for keys past the extent, ending at
// n_q. key_queries[d][row] holds that range for the CTA's key row `row` along dimension d.
//
// A thread's 16 query columns of a score tile are col0 + 8 (j / 2) + j % 2 (j < 16, col0 = 0, 2, 4, 6:
// its column group col0 / 2); the in-box coordinate of column c along d is (c >> box_shift[d]) &
// (box[d] - 1). column_prefix[d][group][c] has bit j set when column j's coordinate along d is below c,
// so the columns whose coordinate lies in [a, b) are prefix[b] & ~prefix[a]. A visit's bits for key row
// `row` are then the AND over dimensions of that set for [a, b) = the key's query range minus the Q
// tile's first index, clamped to the box: a few shared loads and integer operations per row and
// dimension, where the window tests cost two comparisons per (row, column, dimension) and the
// producer's per-row window computations.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/column_pair_bits.hpp"
#include "cuda/common/tile_range_inverse.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"

namespace attnkit::cuda::fmha_sm90 {

inline constexpr int kColumnGroups = 4;

template <int kBlockN, int kBlockM>
struct BoxMaskTables {
  int2 key_queries[fmha::kMaxDims][kBlockN];
  uint32_t column_prefix[fmha::kMaxDims][kColumnGroups][kBlockM + 1];
};

// Fills the tables for KV tile `kv`; threads 0 <= t < threads (the MMA warpgroups) share the work, the
// caller's barrier publishes it.
template <int kBlockN, int kBlockM>
__device__ __forceinline__ void build_box_mask_tables(const fmha::FmhaBackwardParams& p, const fmha::DecodedTile& kv,
                                                      BoxMaskTables<kBlockN, kBlockM>& tables, int t, int threads) {
  static_assert(kBlockM == 64, "16 columns per thread: 8 column blocks of 8, two columns each");
  for (int item = t; item < 2 * kBlockN; item += threads) {
    const int row = item % kBlockN;
    const bool of_begin = item >= kBlockN;
#pragma unroll
    for (int d = 0; d < fmha::kMaxDims; ++d) {
      if (d < p.dims) {
        const int64_t key = kv.origin.index[d] + fmha::in_box(p.kv_space, d, row);
        const int32_t q = static_cast<int32_t>(first_query_past(p.rule[d], of_begin, key, kv.n_q[d], kv.n_kv[d]));
        if (of_begin) {
          tables.key_queries[d][row].y = q;
        } else {
          tables.key_queries[d][row].x = q;
        }
      }
    }
  }
  constexpr int kEntries = kColumnGroups * (kBlockM + 1);
  for (int item = t; item < fmha::kMaxDims * kEntries; item += threads) {
    const int d = item / kEntries;
    const int group = (item / (kBlockM + 1)) % kColumnGroups;
    const int c = item % (kBlockM + 1);
    uint32_t bits = 0;
    if (d < p.dims) {
      for (int j = 0; j < 16; ++j) {
        const int column = 2 * group + 8 * (j / 2) + j % 2;
        if (fmha::in_box(p.q_space, d, column) < c) bits |= 1u << j;
      }
    }
    tables.column_prefix[d][group][c] = bits;
  }
}

// Bit j of allowed[i]: key row rows[i] and this thread's query column j of visit `v` are attended (all
// set for full visits).
template <int kBlockN, int kBlockM, int kRows>
__device__ __forceinline__ void box_allowed_bits(const fmha::FmhaBackwardParams& p, const fmha::QVisit& v,
                                                 const BoxMaskTables<kBlockN, kBlockM>& tables, int column_group,
                                                 const int (&rows)[kRows], uint32_t (&allowed)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) allowed[i] = ~0u;
  if (v.full) return;
#pragma unroll
  for (int d = 0; d < fmha::kMaxDims; ++d) {
    if (d < p.dims) {
      const int first = v.origin.index[d];
      const int box = 1 << p.q_space.box_log2[d];
      const uint32_t* prefix = tables.column_prefix[d][column_group];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int2 range = tables.key_queries[d][rows[i]];
        const int a = min(max(range.x - first, 0), box);
        const int b = min(max(range.y - first, 0), box);
        allowed[i] &= prefix[b] & ~prefix[a];
      }
    }
  }
}

// Whether any key of rows [first_row, first_row + rows) — one consumer's half of the KV box, the box
// halved along its outermost dimension of more than one key, so that its first and last rows hold the
// smallest and largest in-box coordinate of every dimension — may be seen by a query of visit `v`: per
// dimension, the queries that see one of its keys lie in [range(first).x, range(last).y) (both ends
// non-decreasing in the key), which the Q tile must meet; an empty range (a half whose keys along some
// dimension all lie past the extent, where both ends are n_q) meets none. False: every pair of the half is
// masked.
template <int kBlockN, int kBlockM>
__device__ __forceinline__ bool half_meets_visit(const fmha::FmhaBackwardParams& p, const fmha::QVisit& v,
                                                 const BoxMaskTables<kBlockN, kBlockM>& tables, int first_row,
                                                 int rows) {
  bool meets = true;
#pragma unroll
  for (int d = 0; d < fmha::kMaxDims; ++d) {
    if (d < p.dims) {
      const int first = v.origin.index[d];
      const int lo = tables.key_queries[d][first_row].x;
      const int hi = tables.key_queries[d][first_row + rows - 1].y;
      meets = meets && lo < hi && first < hi && first + (1 << p.q_space.box_log2[d]) > lo;
    }
  }
  return meets;
}

// Tile lists with an element mask (p.list.key_bits: the mask packed key-major once per call): a partial
// visit's words, the visit's kBlockM queries of each of the tile's keys, travel through the visit's stage
// (where Sm90BackwardTraits::kStagedKeyWords; else the MMA warpgroups load them, visit_allowed_bits).
// The producer copies them (cp.async, in the visit's copy group) so that the MMA warpgroups read shared
// memory where a global load per key row would sit between the score products and the probabilities.
// (A list visit's Q tile starts at a multiple of the tile height, 64: whole words.)
__device__ __forceinline__ bool visit_has_key_words(const fmha::FmhaBackwardParams& p, const fmha::QVisit& v) {
  return p.list.key_bits != nullptr && !v.full;
}

// The producer thread of tile row `row` (flat key `key`): its words of visit `v` into `words[row]`, zero past
// the keys and past the packed queries.
template <int kBlockN, int kWords>
__device__ __forceinline__ void copy_visit_key_words(const fmha::FmhaBackwardParams& p, int32_t batch,
                                                     const fmha::QVisit& v, int32_t key,
                                                     uint32_t (&words)[kBlockN][kWords], int row) {
  const fmha::BackwardTileLists& l = p.list;
  const int32_t seq_k = p.kv_space.flat_extent;
  const int64_t b = l.mask_batch > 1 ? batch : 0;
  const int64_t h = l.mask_heads > 1 ? v.head : 0;
  const int64_t first = v.origin.index[0] / 32;
  const uint32_t* source = l.key_bits + ((b * l.mask_heads + h) * seq_k + key) * l.key_words + first;
#pragma unroll
  for (int n = 0; n < kWords; ++n) {
    const bool valid = key < seq_k && first + n < l.key_words;
    copy_4_bytes_async(shared_address(&words[row][n]), valid ? source + n : l.key_bits, valid);
  }
}

// Bit j of allowed[i]: flat key key_index[i][0] (tile row key_index[i][0] - first_key) and query column
// col0 + 8 (j / 2) + j % 2 of the visit (the thread's 16 columns of a 64-column accumulator) are attended, from the
// stage's words. (The rows come from the flat keys, which the kernel keeps for other masks anyway, so that no more
// values stay alive across its visit loop.)
template <int kBlockN, int kWords, int kRows>
__device__ __forceinline__ void key_words_allowed_bits(const uint32_t (&words)[kBlockN][kWords],
                                                       const int32_t (&key_index)[kRows][fmha::kMaxDims],
                                                       int32_t first_key, int col0, uint32_t (&allowed)[kRows]) {
  static_assert(kWords == 2, "a 64-query visit: two words per key");
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = key_index[i][0] - first_key;
    allowed[i] = column_pair_bits(words[row][0], words[row][1], col0);
  }
}

// The key-major words of a partial visit in global memory (where the stage holds none: D 128), for this thread's key
// rows key_index[i][0], when the visit's Q tile starts at a word boundary; false (words untouched) for a full visit,
// one that does not, or a mask not packed by key (visit_allowed_bits covers those).
template <int kRows>
__device__ __forceinline__ bool load_visit_key_words(const fmha::FmhaBackwardParams& p, int32_t batch,
                                                     const fmha::QVisit& v,
                                                     const int32_t (&key_index)[kRows][fmha::kMaxDims],
                                                     uint32_t (&words)[kRows][2]) {
  const int32_t q0 = v.origin.index[0];
  if (v.full || p.list.key_bits == nullptr || q0 % 32 != 0) return false;
  const int32_t seq_k = p.kv_space.flat_extent;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int32_t k = key_index[i][0];
    words[i][0] = words[i][1] = 0u;
    if (k < seq_k) fmha::load_key_bit_words(p.list, seq_k, batch, v.head, k, q0, words[i]);
  }
  return true;
}

// Bit j of allowed[i] from the words of key row i (load_visit_key_words): query column col0 + 8 (j / 2) + j % 2.
template <int kRows>
__device__ __forceinline__ void visit_key_words_bits(const uint32_t (&words)[kRows][2], int col0,
                                                     uint32_t (&allowed)[kRows]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) allowed[i] = column_pair_bits(words[i][0], words[i][1], col0);
}

}  // namespace attnkit::cuda::fmha_sm90
