// BoxPolicy: the mask policy for no mask, causal masks (flat, top-left or bottom-right aligned) and
// neighborhood masks in 1-D, 2-D and 3-D (kernel size, dilation, stride and causality per dimension,
// all runtime values).
//
// Per Q tile it visits a box of KV tiles that covers the union of the windows of the tile's queries in
// every dimension (dim_key_tiles in cuda/common/tile_range.hpp), last dimension fastest; a KV tile
// inside the intersection of those windows in every dimension is full and skips element masking. KV
// tiles start where the window union needs them (KvTileOrigin::window), not necessarily at multiples
// of the KV box: loads (TMA coordinates, cp.async row starts), row masks and the positional bias all
// take the tile's first key index as it is.
// Tiles live in group-index space: the Q tile and all its KV tiles come from one dilation group, so
// dilation only changes how indices map to coordinates when rows are loaded.
// For partial tiles, each query row's window per dimension (begin, end) is kept in shared memory and
// turned into the row's column mask through the column prefix table (fmha_mask_tables.cuh).
#pragma once
#include <cstdint>

#include "cuda/common/tile_range.hpp"
#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_mask_tables.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Traits>
class BoxPolicy {
 public:
  static constexpr int kRows = Traits::kRows;
  static constexpr bool kPositionalBias = true;  // neighborhood masks may carry one (FmhaParams::rpb)
  static constexpr int kCols = Traits::kCols;
  static constexpr bool kPowerOfTwoRows = (Traits::kBlockM & (Traits::kBlockM - 1)) == 0;

  struct Tile {
    int32_t index[kMaxDims];  // first key index per dimension (group-index space)
    bool full;
  };
  struct TileBits {};  // box masks need no per-tile data from memory

  // Per-CTA tile ranges in key indices (first key of a tile), kept in shared memory (read once per
  // tile) to spare registers. Tiles are walked like an odometer, last dimension fastest.
  struct State {
    int32_t first[kMaxDims];
    int32_t end[kMaxDims];
    int32_t full_first[kMaxDims];
    int32_t full_end[kMaxDims];
    int32_t step[kMaxDims];  // KV box extent
    int32_t group[kMaxDims];
    int32_t dims;
  };
  static_assert(kMaxDims == 3, "at_dim (fmha_mask_tables.cuh) selects among three dimensions");
  static_assert(16 + sizeof(State) <= Traits::kStateBytes,
                "KV head offsets and tile ranges overflow their shared memory");

  // `state_smem` must be published by a barrier before the tile and mask functions are called. Every
  // thread of the CTA calls it (whole warps: lanes 0, 1 and 2 of each warp compute the tile ranges of
  // dimensions 0, 1 and 2 side by side and the warp shares them by shuffles, so a 3-D mask costs one
  // dimension's latency).
  __device__ __forceinline__ void init(const FmhaParams& p, const CtaTile& cta, char* policy_smem, void* state_smem,
                                       int tid) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int my_dim = lane < kMaxDims ? lane : 0;
    DimKeyTiles mine;
    mine.count = 1;
    mine.full_end = 1;
    if (my_dim < p.dims) {
      const int log2 = p.kv_space.box_log2[my_dim];
      const int64_t q_first = at_dim(cta.q.index, my_dim);
      // A query tile of BlockM rows not a power of two (flat query sides only) holds the first BlockM of its box.
      const int64_t box_rows = int64_t{1} << p.q_space.box_log2[my_dim];
      const int64_t q_end = q_first + (kPowerOfTwoRows ? box_rows : min(box_rows, int64_t{Traits::kBlockM}));
      const int64_t n_q = at_dim(cta.n_q, my_dim);
      const int64_t q_last = (q_end < n_q ? q_end : n_q) - 1;
      mine = dim_key_tiles(p.rule[my_dim], q_first, q_last, at_dim(cta.n_kv, my_dim), log2, KvTileOrigin::window);
    }
    State s;
    s.dims = p.dims;
    count_ = 1;
    any_partial_ = false;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      const int log2 = p.kv_space.box_log2[d];
      const int32_t origin = __shfl_sync(0xffffffffu, static_cast<int32_t>(mine.origin), d);
      const int32_t count = __shfl_sync(0xffffffffu, static_cast<int32_t>(mine.count), d);
      const int32_t full_first = __shfl_sync(0xffffffffu, static_cast<int32_t>(mine.full_first), d);
      const int32_t full_end = __shfl_sync(0xffffffffu, static_cast<int32_t>(mine.full_end), d);
      s.first[d] = origin;
      s.end[d] = origin + (count << log2);
      s.full_first[d] = origin + (full_first << log2);
      s.full_end[d] = origin + (full_end << log2);
      s.step[d] = 1 << log2;
      s.group[d] = cta.q.group[d];
      first_origin_.index[d] = s.first[d];
      first_origin_.group[d] = s.group[d];
      count_ *= count;
      any_partial_ = any_partial_ || full_first != 0 || full_end != count;
    }
    state_ = static_cast<State*>(state_smem);
    if (tid == 0) *state_ = s;
    windows_ = reinterpret_cast<int2*>(policy_smem);
    prefix_.table = reinterpret_cast<uint32_t*>(policy_smem + Traits::kWindowBytes);
  }

  __device__ __forceinline__ int count() const { return count_; }

  // The first KV tile's origin from this thread's own registers: usable before the shared state is
  // published (the Hopper producer issues that tile's loads before the CTA's setup barrier).
  __device__ __forceinline__ TileOrigin first_origin() const { return first_origin_; }

  struct Lookahead {};  // tile ranges are in shared memory: nothing to read ahead
  __device__ __forceinline__ Lookahead lookahead(int) const { return {}; }

  __device__ __forceinline__ Tile first_tile(Lookahead) const {
    Tile t;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) t.index[d] = state_->first[d];
    t.full = is_full(t);
    return t;
  }

  __device__ __forceinline__ Tile next_tile(const Tile& current, Lookahead) const {
    Tile t = current;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      t.index[d] += state_->step[d];
      if (t.index[d] < state_->end[d]) break;
      t.index[d] = state_->first[d];
    }
    t.full = is_full(t);
    return t;
  }

  __device__ __forceinline__ bool is_full(const Tile& t) const {
    bool full = true;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      full = full && t.index[d] >= state_->full_first[d] && t.index[d] < state_->full_end[d];
    }
    return full;
  }

  __device__ __forceinline__ TileOrigin origin(const Tile& t) const {
    TileOrigin o;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      o.index[d] = t.index[d];
      o.group[d] = state_->group[d];
    }
    return o;
  }

  // Row windows and column prefix masks for partial tiles; nothing when every tile of the CTA is full.
  // The threads split the (dimension, row) windows, then the prefix entries (only in-box coordinates
  // 0..box of each dimension, the ones row_masks reads).
  __device__ __forceinline__ void prepare_shared(const FmhaParams& p, const CtaTile& cta, const int (&col_of)[kCols],
                                                 int tid) const {
    if (!any_partial_) return;
    for (int e = tid; e < p.dims * Traits::kBlockM; e += Traits::kThreads) {
      const int d = e / Traits::kBlockM;
      const int r = e % Traits::kBlockM;
      const int32_t in_box = (r >> p.q_space.box_shift[d]) & ((1 << p.q_space.box_log2[d]) - 1);
      const int32_t i = at_dim(cta.q.index, d) + in_box;
      detail::IndexRange w{0, 0};
      if (i < at_dim(cta.n_q, d)) w = window_of(p.rule[d], i, at_dim(cta.n_kv, d));
      windows_[e] = make_int2(static_cast<int>(w.begin), static_cast<int>(w.end));
    }
    int32_t shift[3];
    int32_t mask[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      shift[d] = p.kv_space.box_shift[d];
      mask[d] = (1 << p.kv_space.box_log2[d]) - 1;
    }
    prefix_.build(col_of, p.dims, shift, mask, tid);
  }

  __device__ __forceinline__ TileBits fetch_bits(const Tile&, const FmhaParams&, int) const { return {}; }

  __device__ __forceinline__ void row_masks(const Tile& t, const TileBits&, const int (&row_of)[kRows], int lane_class,
                                            uint32_t (&masks)[kRows]) const {
    const int dims = state_->dims;
#pragma unroll
    for (int i = 0; i < kRows; ++i) masks[i] = ~0u;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d < dims) {
        const int box = state_->step[d];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const int2 w = windows_[d * Traits::kBlockM + row_of[i]];
          const int lo = min(max(w.x - t.index[d], 0), box);
          const int hi = min(max(w.y - t.index[d], lo), box);
          masks[i] &= prefix_.at(lane_class, d, hi) & ~prefix_.at(lane_class, d, lo);
        }
      }
    }
  }

 private:
  int32_t count_;
  TileOrigin first_origin_;
  State* state_;
  bool any_partial_;  // some KV tile of this CTA needs row masks
  int2* windows_;
  ColumnPrefixTable<Traits> prefix_;
};

}  // namespace attnkit::cuda::fmha
