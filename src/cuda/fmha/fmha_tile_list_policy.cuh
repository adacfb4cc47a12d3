// TileListPolicy: the mask policy for block masks and element masks over flat token indices.
//
// The preprocessing kernels (fmha_tile_list_build.cuh) classify every (mask batch, mask head, Q tile,
// KV tile) as empty, full or partial and write, per Q tile, the compact list of non-empty KV tiles;
// this policy walks that list, so the work scales with the non-empty tiles. A partial entry masks the
// keys past the end of the sequence and, when it carries element bits, applies them: each thread reads
// its kRows x kCols predicate bits (kBitWords words, coalesced across the CTA) for the tile. The bits
// are fetched before the tile's Q*K^T product so that their latency hides behind it.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_mask_tables.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Traits>
class TileListPolicy {
 public:
  static constexpr int kRows = Traits::kRows;
  static constexpr bool kPositionalBias = false;  // block and element masks carry no positional bias
  static constexpr int kCols = Traits::kCols;
  static constexpr int kBitWords = Traits::kBitWords;

  struct Tile {
    uint32_t entry;
    bool full;
  };
  struct TileBits {
    uint32_t word[kBitWords];
  };

  __device__ __forceinline__ void init(const FmhaParams& p, const CtaTile& cta, char* policy_smem, void*, int) {
    const TileListArgs& list = p.list;
    const int32_t mask_b = list.mask_batch > 1 ? cta.batch : 0;
    const int32_t mask_h = list.mask_heads > 1 ? cta.head : 0;
    const int64_t row = (static_cast<int64_t>(mask_b) * list.mask_heads + mask_h) * list.q_tiles + cta.q_tile[0];
    count_ = list.counts[row];
    entries_ = list.entries + row * list.kv_tiles;
    slot_base_ = row * list.kv_tiles;
    seq_k_ = cta.n_kv[0];
    prefix_.table = reinterpret_cast<uint32_t*>(policy_smem + Traits::kWindowBytes);
  }

  __device__ __forceinline__ int count() const { return count_; }

  // The first listed KV tile's origin (count() > 0), read from the list directly.
  __device__ __forceinline__ TileOrigin first_origin() const { return origin(first_tile(entries_[0])); }

  // The list entry of tile i, read one iteration before it is needed so its latency stays hidden.
  using Lookahead = uint32_t;
  __device__ __forceinline__ Lookahead lookahead(int i) const { return i < count_ ? entries_[i] : 0u; }

  __device__ __forceinline__ Tile first_tile(Lookahead entry) const { return next_tile(Tile{}, entry); }

  __device__ __forceinline__ Tile next_tile(const Tile&, Lookahead entry) const {
    Tile t;
    t.entry = entry;
    t.full = (t.entry & kEntryPartial) == 0;
    return t;
  }

  __device__ __forceinline__ TileOrigin origin(const Tile& t) const {
    TileOrigin o;
    o.index[0] = static_cast<int32_t>(t.entry & kEntryTileMask) * Traits::kBlockN;
    o.index[1] = 0;
    o.index[2] = 0;
    o.group[0] = 0;
    o.group[1] = 0;
    o.group[2] = 0;
    return o;
  }

  __device__ __forceinline__ void prepare_shared(const FmhaParams&, const CtaTile&, const int (&col_of)[kCols],
                                                 int tid) const {
    const int32_t shift[3] = {0, 0, 0};
    const int32_t mask[3] = {Traits::kBlockN - 1, 0, 0};
    prefix_.build(col_of, 1, shift, mask, tid);
  }

  __device__ __forceinline__ TileBits fetch_bits(const Tile& t, const FmhaParams& p, int tid) const {
    TileBits b;
#pragma unroll
    for (int w = 0; w < kBitWords; ++w) b.word[w] = ~0u;
    if (!t.full && (t.entry & kEntryHasBits)) {
      const int64_t slot = slot_base_ + (t.entry & kEntryTileMask);
      const uint32_t* bits = p.list.bits + slot * kBitWords * Traits::kThreads + tid;
#pragma unroll
      for (int w = 0; w < kBitWords; ++w) b.word[w] = __ldg(bits + w * Traits::kThreads);
    }
    return b;
  }

  __device__ __forceinline__ void row_masks(const Tile& t, const TileBits& b, const int (&)[kRows], int lane_class,
                                            uint32_t (&masks)[kRows]) const {
    int keys_left = seq_k_ - static_cast<int32_t>(t.entry & kEntryTileMask) * Traits::kBlockN;
    keys_left = keys_left < 0 ? 0 : (keys_left > Traits::kBlockN ? Traits::kBlockN : keys_left);
    const uint32_t in_sequence = prefix_.at(lane_class, 0, keys_left);
    constexpr uint32_t kRowBits = kCols == 32 ? ~0u : ((1u << kCols) - 1u);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int bit = i * kCols;
      masks[i] = ((b.word[bit / 32] >> (bit % 32)) & kRowBits) & in_sequence;
    }
  }

 private:
  int32_t count_;
  int32_t seq_k_;
  int64_t slot_base_;
  const uint32_t* entries_;
  ColumnPrefixTable<Traits> prefix_;
};

}  // namespace attnkit::cuda::fmha
