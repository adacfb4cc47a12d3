// Which tiles a backward CTA owns and visits, the element predicate of partial tiles, and the tile
// stores of the backward kernels.
//
// Tile enumeration follows the forward (fmha_tokens.cuh): a linear tile index splits into a dilation
// group and a box position per dimension, last dimension fastest; decode_tile() turns it into a
// TileOrigin. The visit schedules:
//   KvBoxSchedule   (dK/dV kernel, no / causal / neighborhood masks): per dimension the Q tiles that meet
//                   the KV tile (dim_query_tiles), walked as an odometer, once per query head of the GQA
//                   group, first dimension fastest; a Q tile is full iff it is full in every dimension.
//                   (First dimension fastest: the Q tiles that meet only the first or only the last rows
//                   of the KV box along it — one of the Hopper kernel's two MMA warpgroups skips such a
//                   visit — alternate, a bottom-only visit followed by the next column's top-only one, so
//                   that both warpgroups keep working.) The Q tiles start where p.q_tile_origins says: at
//                   multiples of the Q box, or at the first query that sees the KV tile when that takes
//                   fewer tiles (KvTileOrigin::window; such a visit's rows lie in several of the grid's Q
//                   tiles, whose row statistics it gathers row by row, and its q_linear is -1).
//   KvListSchedule  (dK/dV kernel, block / element masks): the KV tile's compacted column list of Q
//                   tiles, once per query head of the group (each head may have its own list).
//   QBoxSchedule    (dQ kernel): the forward's box of KV tiles, at window origins as the forward's
//                   (dim_key_tiles, KvTileOrigin::window).
//   QListSchedule   (dQ kernel, block / element masks): the Q tile's compacted row list of KV tiles.
// Partial tiles test each (query, key) element: box masks against the query's window per dimension,
// list masks against the mask tensor itself (a bool element or block mask in global memory, plus the
// sequence ends).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/common/tile_range_inverse.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

struct DecodedTile {
  TileOrigin origin;           // first index per dimension (group-index space) and dilation group
  int32_t position[kMaxDims];  // box position per dimension
  int32_t n_q[kMaxDims];       // query indices per dimension in this group
  int32_t n_kv[kMaxDims];      // key indices per dimension in this group
  bool valid;                  // false: past the end of a smaller dilation group
};

// `linear` over (dilation groups, tiles per dimension); `space` gives the box sizes of this side.
__device__ __forceinline__ DecodedTile decode_tile(const FmhaBackwardParams& p, int32_t linear,
                                                   const int32_t (&tiles)[kMaxDims], const TokenSpace& space,
                                                   const TokenSpace& other_space, bool is_query) {
  DecodedTile t;
  int32_t x = linear;
  int32_t position[kMaxDims];
  int32_t group[kMaxDims];
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    position[d] = x % tiles[d];
    x /= tiles[d];
  }
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    group[d] = x % p.dilation[d];
    x /= p.dilation[d];
  }
  t.valid = true;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    t.position[d] = position[d];
    t.origin.index[d] = position[d] << space.box_log2[d];
    t.origin.group[d] = group[d];
    const int32_t own = indices_in_group(space, d, p.dilation[d], group[d]);
    const int32_t other = indices_in_group(other_space, d, p.dilation[d], group[d]);
    t.n_q[d] = is_query ? own : other;
    t.n_kv[d] = is_query ? other : own;
    t.valid = t.valid && t.origin.index[d] < own;
  }
  return t;
}

// Linear index of the Q tile at `position` in dilation group `group` (the inverse of decode_tile).
__device__ __forceinline__ int32_t q_tile_linear(const FmhaBackwardParams& p, const int32_t (&group)[kMaxDims],
                                                 const int32_t (&position)[kMaxDims]) {
  int32_t x = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) x = x * p.dilation[d] + group[d];
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) x = x * p.q_tiles[d] + position[d];
  return x;
}

// One visit of the dK/dV kernel: a Q tile of one query head.
struct QVisit {
  int32_t head;      // query head
  int32_t q_linear;  // linear Q tile index (row statistics); -1: a window-origin tile, not one of the grid's
  TileOrigin origin;
  bool full;
};

// One visit of the dQ kernel: a KV tile.
struct KvVisit {
  TileOrigin origin;
  bool full;
};

template <int BlockM>
class KvBoxSchedule {
 public:
  // Per-CTA ranges, kept in shared memory to spare registers: per dimension the first query index of
  // the first Q tile, the number of tiles and the full ones among them (tiles from the first).
  struct State {
    int32_t origin[kMaxDims];
    int32_t span[kMaxDims];
    int32_t full_first[kMaxDims];
    int32_t full_end[kMaxDims];
    int32_t per_head;
    int32_t aligned;  // every origin a multiple of its Q box: each visit is a Q tile of the grid
  };

  // Every thread keeps its members; the 32 threads 0 <= tid < 32 (one whole warp) compute the shared
  // state: lane 4 d + b runs bound b of dimension d (one binary search each, in parallel: run one after
  // another by one thread, they kept every warp of the CTA waiting at the barrier that publishes the
  // state for ~8 % of the na2d 128^2 K31 dK/dV kernel's time, ncu), lane d gathers its dimension's four.
  // `kv_heads` KV heads from head_kv on (a box mask is the same for every head): the visits of KV head
  // head_kv + j are visits [j, j + 1) * count() / kv_heads.
  __device__ __forceinline__ void init(const FmhaBackwardParams& p, const DecodedTile& kv, int32_t /*batch*/,
                                       int32_t head_kv, State* state, int tid, int32_t kv_heads = 1) {
    state_ = state;
    head0_ = head_kv * p.heads_per_kv;
    heads_ = p.heads_per_kv * kv_heads;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) group_[d] = kv.origin.group[d];
    if (tid < 0 || tid >= 32) return;
    const int lane = tid;
    // Dimension d's operands, selected with constant indices (indexing the params at run time would copy
    // them to local memory).
    const int search_dim = lane / kInverseBounds;
    const int own_dim = lane < kMaxDims ? lane : 0;
    WindowRule rule{};
    int64_t k_first = 0, kv_box = 1, n_q = 1, n_kv = 1, own_n_q = 1;
    int own_q_log2 = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == search_dim) {
        rule = p.rule[d];
        k_first = kv.origin.index[d];
        kv_box = int64_t{1} << p.kv_space.box_log2[d];
        n_q = kv.n_q[d];
        n_kv = kv.n_kv[d];
      }
      if (d == own_dim) {
        own_n_q = kv.n_q[d];
        own_q_log2 = p.q_space.box_log2[d];
      }
    }
    int64_t bound = 0;
    if (search_dim < p.dims)
      bound = inverse_bound(rule, lane % kInverseBounds, k_first, k_first + kv_box - 1, n_q, n_kv);
    int64_t bounds[kInverseBounds];
#pragma unroll
    for (int b = 0; b < kInverseBounds; ++b) bounds[b] = __shfl_sync(0xffffffffu, bound, own_dim * kInverseBounds + b);
    DimKeyTiles r;
    r.count = 1;
    r.full_end = 1;
    if (lane < p.dims) r = dim_query_tiles_of_bounds(bounds, own_n_q, own_q_log2, p.q_tile_origins);
    const int32_t span = lane < kMaxDims ? static_cast<int32_t>(r.count) : 1;
    int32_t per_head = 1;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) per_head *= __shfl_sync(0xffffffffu, span, d);
    const bool aligned = __all_sync(0xffffffffu, (r.origin & ((int64_t{1} << own_q_log2) - 1)) == 0);
    if (lane < kMaxDims) {
      state_->origin[lane] = static_cast<int32_t>(r.origin);
      state_->span[lane] = span;
      state_->full_first[lane] = static_cast<int32_t>(r.full_first);
      state_->full_end[lane] = static_cast<int32_t>(r.full_end);
    }
    if (lane == 0) {
      state_->per_head = per_head;
      state_->aligned = aligned ? 1 : 0;
    }
  }

  // Valid after the barrier that publishes the state.
  __device__ __forceinline__ int count() const { return state_->per_head * heads_; }

  __device__ __forceinline__ QVisit visit(const FmhaBackwardParams& p, int i) const {
    const State& s = *state_;
    QVisit v;
    v.head = head0_ + i / s.per_head;
    int32_t t = i % s.per_head;
    int32_t position[kMaxDims];
    v.full = true;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      const int32_t tile = t % s.span[d];
      t /= s.span[d];
      v.full = v.full && tile >= s.full_first[d] && tile < s.full_end[d];
      v.origin.index[d] = s.origin[d] + (tile << p.q_space.box_log2[d]);
      v.origin.group[d] = group_[d];
      position[d] = v.origin.index[d] >> p.q_space.box_log2[d];
    }
    v.q_linear = s.aligned != 0 ? q_tile_linear(p, group_, position) : -1;
    return v;
  }

 private:
  State* state_;
  int32_t head0_;
  int32_t heads_;
  int32_t group_[kMaxDims];
};

template <int BlockM>
class KvListSchedule {
 public:
  struct State {
    int32_t total;
  };

  // One KV head per CTA (`kv_heads` is 1: tile lists may differ per head).
  __device__ __forceinline__ void init(const FmhaBackwardParams& p, const DecodedTile& kv, int32_t batch,
                                       int32_t head_kv, State* state, int tid, int32_t /*kv_heads*/ = 1) {
    const BackwardTileLists& l = p.list;
    state_ = state;
    head0_ = head_kv * p.heads_per_kv;
    heads_ = p.heads_per_kv;
    kv_tile_ = kv.position[0];
    batch_row_ = (l.mask_batch > 1 ? batch : 0) * l.mask_heads;
    if (tid == 0) {
      int32_t total = 0;
      for (int32_t h = 0; h < heads_; ++h) total += l.kv_counts[row(p, head0_ + h)];
      state_->total = total;
    }
  }

  __device__ __forceinline__ int count() const { return state_->total; }

  __device__ __forceinline__ QVisit visit(const FmhaBackwardParams& p, int i) const {
    const BackwardTileLists& l = p.list;
    int32_t head = head0_;
    int64_t r = row(p, head);
    int32_t c = l.kv_counts[r];
    while (i >= c) {  // heads with their own lists: find the head of visit i
      i -= c;
      ++head;
      r = row(p, head);
      c = l.kv_counts[r];
    }
    const uint32_t entry = l.kv_entries[r * l.q_tiles + i];
    QVisit v;
    v.head = head;
    v.q_linear = static_cast<int32_t>(entry & kEntryTileMask);
    v.full = (entry & kEntryPartial) == 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      v.origin.index[d] = 0;
      v.origin.group[d] = 0;
    }
    v.origin.index[0] = v.q_linear * BlockM;
    return v;
  }

 private:
  __device__ __forceinline__ int64_t row(const FmhaBackwardParams& p, int32_t head) const {
    const int32_t mask_h = p.list.mask_heads > 1 ? head : 0;
    return static_cast<int64_t>(batch_row_ + mask_h) * p.list.kv_tiles + kv_tile_;
  }

  State* state_;
  int32_t head0_;
  int32_t heads_;
  int32_t kv_tile_;
  int32_t batch_row_;
};

template <int BlockN>
class QBoxSchedule {
 public:
  // Per dimension: the first key index of the first KV tile, the number of tiles and the full ones among
  // them (tiles from the first).
  struct State {
    int32_t first[kMaxDims];
    int32_t span[kMaxDims];
    int32_t full_first[kMaxDims];
    int32_t full_end[kMaxDims];
    int32_t count;
  };

  __device__ __forceinline__ void init(const FmhaBackwardParams& p, const DecodedTile& q, int32_t, State* state,
                                       int tid) {
    state_ = state;
    if (tid == 0) {
      State s;
      int32_t count = 1;
#pragma unroll
      for (int d = 0; d < kMaxDims; ++d) {
        DimKeyTiles r;
        if (d < p.dims) {
          const int64_t q_first = q.origin.index[d];
          const int64_t q_end = q_first + (int64_t{1} << p.q_space.box_log2[d]);
          const int64_t q_last = (q_end < q.n_q[d] ? q_end : q.n_q[d]) - 1;
          r = dim_key_tiles(p.rule[d], q_first, q_last, q.n_kv[d], p.kv_space.box_log2[d], KvTileOrigin::window);
        } else {
          r.count = 1;
          r.full_end = 1;
        }
        s.first[d] = static_cast<int32_t>(r.origin);
        s.span[d] = static_cast<int32_t>(r.count);
        s.full_first[d] = static_cast<int32_t>(r.full_first);
        s.full_end[d] = static_cast<int32_t>(r.full_end);
        count *= s.span[d];
      }
      s.count = count;
      *state_ = s;
    }
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) group_[d] = q.origin.group[d];
  }

  __device__ __forceinline__ int count() const { return state_->count; }

  __device__ __forceinline__ KvVisit visit(const FmhaBackwardParams& p, int i) const {
    const State& s = *state_;
    KvVisit v;
    int32_t t = i;
    v.full = true;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      const int32_t tile = t % s.span[d];
      t /= s.span[d];
      v.full = v.full && tile >= s.full_first[d] && tile < s.full_end[d];
      v.origin.index[d] = s.first[d] + (tile << p.kv_space.box_log2[d]);
      v.origin.group[d] = group_[d];
    }
    return v;
  }

 private:
  State* state_;
  int32_t group_[kMaxDims];
};

template <int BlockN>
class QListSchedule {
 public:
  struct State {
    int32_t count;
  };

  __device__ __forceinline__ void init(const FmhaBackwardParams& p, const DecodedTile& q, int32_t head, State* state,
                                       int tid) {
    const BackwardTileLists& l = p.list;
    state_ = state;
    const int32_t mask_b = l.mask_batch > 1 ? static_cast<int32_t>(blockIdx.z) : 0;
    const int32_t mask_h = l.mask_heads > 1 ? head : 0;
    row_ = (static_cast<int64_t>(mask_b) * l.mask_heads + mask_h) * l.q_tiles + q.position[0];
    if (tid == 0) state_->count = l.q_counts[row_];
  }

  __device__ __forceinline__ int count() const { return state_->count; }

  __device__ __forceinline__ KvVisit visit(const FmhaBackwardParams& p, int i) const {
    const uint32_t entry = p.list.q_entries[row_ * p.list.kv_tiles + i];
    KvVisit v;
    v.full = (entry & kEntryPartial) == 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      v.origin.index[d] = 0;
      v.origin.group[d] = 0;
    }
    v.origin.index[0] = static_cast<int32_t>(entry & kEntryTileMask) * BlockN;
    return v;
  }

 private:
  State* state_;
  int64_t row_;
};

// Element offset of the mask slice of (batch, query head) for list masks.
__device__ __forceinline__ int64_t list_mask_base(const BackwardTileLists& l, int32_t batch, int32_t head) {
  const int64_t b = l.mask_batch > 1 ? batch : 0;
  const int64_t h = l.mask_heads > 1 ? head : 0;
  return b * l.mask_stride[0] + h * l.mask_stride[1];
}

// Is flat key `k` attended by flat query `q` under a block / element mask (both inside the sequences)?
__device__ __forceinline__ bool list_mask_allows(const BackwardTileLists& l, int64_t base, int32_t q, int32_t k) {
  if (l.kind == TileMaskKind::element) return l.mask[base + q * l.mask_stride[2] + k * l.mask_stride[3]] != 0;
  return l.mask[base + (q / l.block_q) * l.mask_stride[2] + (k / l.block_k) * l.mask_stride[3]] != 0;
}

// Element masks: the words of key row k's packed bits (BackwardTileLists::key_bits) for the kWords * 32
// queries from q0 (a multiple of 32) on, in the mask slice of (batch, query head); zero past the queries.
template <int kWords>
__device__ __forceinline__ void load_key_bit_words(const BackwardTileLists& l, int32_t seq_k, int32_t batch,
                                                   int32_t head, int32_t k, int32_t q0, uint32_t (&words)[kWords]) {
  const int64_t b = l.mask_batch > 1 ? batch : 0;
  const int64_t h = l.mask_heads > 1 ? head : 0;
  const uint32_t* row = l.key_bits + ((b * l.mask_heads + h) * seq_k + k) * l.key_words;
  const int64_t first = q0 / 32;
#pragma unroll
  for (int n = 0; n < kWords; ++n) words[n] = first + n < l.key_words ? row[first + n] : 0u;
}

// Bit `offset` (0 <= offset < 32 * kWords) of the words, selected without indexing a register array.
template <int kWords>
__device__ __forceinline__ bool key_bit(const uint32_t (&words)[kWords], int offset) {
  uint32_t word = words[0];
#pragma unroll
  for (int n = 1; n < kWords; ++n) word = (offset >> 5) == n ? words[n] : word;
  return (word >> (offset & 31)) & 1u;
}

// Converts a fp32 accumulator tile (Rows x HeadDim, rows over warps) to Element, stages it through the
// swizzled shared tile `smem` and writes whole 16-byte chunks of the rows that row_start() maps to
// memory (nullptr: outside the extents), first `valid_cols` columns only. The caller's barrier must
// make `smem` free; returns after a barrier of its own (smem may be reused once every thread returned).
template <class Traits, int Rows, class SmemLayout, class Acc, class RowStart>
__device__ __forceinline__ void store_tile(const Acc& acc, typename Traits::Element* smem, const SmemLayout& layout,
                                           const RowStart& row_start, int valid_cols, int tid) {
  using namespace cute;
  using Element = typename Traits::Element;
  Tensor s = make_tensor(make_smem_ptr(smem), layout);
  Tensor r = make_tensor_like<Element>(acc);
  CUTE_UNROLL
  for (int i = 0; i < size(acc); ++i) r(i) = static_cast<Element>(acc(i));
  typename Traits::TiledMma mma;
  auto copy_c = make_tiled_copy_C(typename Traits::SmemStoreAtom{}, mma);
  auto thread_copy = copy_c.get_thread_slice(tid);
  Tensor src = thread_copy.retile_S(r);
  Tensor dst = thread_copy.partition_D(s);
  copy(copy_c, src, dst);
  __syncthreads();
  constexpr int kElementsPerChunk = 16 / int(sizeof(Element));
  const int col = (tid % Traits::kChunksPerRow) * kElementsPerChunk;
  const int first_row = tid / Traits::kChunksPerRow;
  if (col < valid_cols) {
#pragma unroll
    for (int pass = 0; pass < Rows / Traits::kRowsPerPass; ++pass) {
      const int row = first_row + pass * Traits::kRowsPerPass;
      Element* out = row_start(row);
      if (out != nullptr) *reinterpret_cast<uint4*>(out + col) = *reinterpret_cast<const uint4*>(&s(row, col));
    }
  }
  __syncthreads();
}

// Start of row `row` of a tile of writable tensor `a`, or nullptr outside the extents.
template <class Element>
__device__ __forceinline__ Element* tile_row_output(const TensorAddress& a, int64_t head_offset,
                                                    const TokenSpace& space, const int32_t (&dilation)[kMaxDims],
                                                    const TileOrigin& origin, int row) {
  const RowToken t = row_token(space, dilation, origin, row);
  return t.valid ? static_cast<Element*>(a.data) + head_offset + token_offset(a, t) : nullptr;
}

}  // namespace attnkit::cuda::fmha
