// Params of the portable fused-attention backward kernels: the plain struct every backward kernel
// receives by value, built on the host by make_backward_launch() (fmha_backward_arguments.cpp).
//
// Tiles are boxes of tokens exactly as in the forward (TokenSpace, fmha_params.hpp): Q tiles of BlockM
// query tokens, KV tiles of BlockN key tokens, enumerated per dilation group and box position, last
// dimension fastest. A tile's linear index is group-major: ((group linear) * prod(tiles) + tile linear).
//
// Per-row statistics live in the workspace in "tile-row" order, so that a Q tile's rows are contiguous
// and load with 16-byte copies (a dK/dV visit of a window-origin Q tile gathers its rows one by one from
// the grid's tiles that hold them): element ((b * Hq + h) * total_q_tiles + q_tile) * BlockM + row of
//   lse_log2  the forward's LSE times log2(e), or +inf for rows with no key and rows past the extents
//             (so that exp2(s * scale_log2 - lse_log2) is 0 for them, never inf or NaN);
//   delta     rowsum(dO * O) in fp32 (0 past the extents).
//
// accumulate_dq (fast mode on both tiers, AttentionBackward::deterministic == false, and the Hopper tier's
// deterministic mode): the dK/dV kernel also adds each pair's dS K into dq_accum, an fp32 [B, Sq, Hq, D]
// tensor in the workspace (zeroed before, unscaled), and a convert step writes d_q = scale * dq_accum (a
// kernel of its own, or the dK/dV kernel's last CTA for small problems: fmha_backward_dq_convert.cuh);
// the dQ kernel does not run. With ordered_dq (the Hopper tier's deterministic mode) the additions into
// each Q tile's rows follow one fixed order (fmha_backward_dq_order.hpp): the KV tiles that meet the Q
// tile take turns, counted in dq_turns.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha {

// Per-KV-tile lists of Q tiles (dK/dV kernel) and per-Q-tile lists of KV tiles (dQ kernel) for block
// and element masks, built by fmha_backward_lists.cuh. Entries are tile | kEntryPartial.
struct BackwardTileLists {
  const uint32_t* q_entries = nullptr;   // [mask_bh][q_tiles][kv_tiles]: KV tiles of each Q tile
  const int32_t* q_counts = nullptr;     // [mask_bh][q_tiles]
  const uint32_t* kv_entries = nullptr;  // [mask_bh][kv_tiles][q_tiles]: Q tiles of each KV tile
  const int32_t* kv_counts = nullptr;    // [mask_bh][kv_tiles]
  int32_t q_tiles = 0;
  int32_t kv_tiles = 0;
  int32_t mask_batch = 1;  // 1: broadcast over the batch
  int32_t mask_heads = 1;  // 1: broadcast over the heads
  // The mask itself, read for the element predicate of partial tiles (block masks; element masks read key_bits).
  TileMaskKind kind = TileMaskKind::block;
  const uint8_t* mask = nullptr;
  // Element masks: the mask packed key-major, [mask_bh][seq_k][key_words] 32-bit words (key_words =
  // query_bit_words(seq_q)), bit q % 32 of word q / 32 of key row k set when query q attends key k (zero past
  // the queries; launch_mask_bits_by_key).
  const uint32_t* key_bits = nullptr;
  int64_t key_words = 0;
  int64_t mask_stride[4] = {0, 0, 0, 0};
  int32_t block_q = 1;
  int32_t block_k = 1;
};

// The dK/dV grid's launch order (fmha_backward_split.hpp, order_kv_tiles_heaviest_first): in the grid's
// last (batch, KV head) pairs, from linear index first_head = batch * heads_kv + head on, the x-th KV tile
// to launch is group (x % groups) at box position position[x / groups] (group-major linear index
// group * positions + position[...]); elsewhere, and where positions == 0, the tiles' own order.
inline constexpr int kMaxOrderedKvPositions = 1024;
struct KvTileOrder {
  int32_t positions = 0;
  int32_t groups = 1;
  int32_t first_head = 0;
  uint16_t position[kMaxOrderedKvPositions] = {};
  // Ordered dQ (fmha_backward_dq_order.hpp): the x-th KV tile of every group launches at the descending
  // position descending_launch_position(x) instead (positions, first_head and position[] unused).
  bool descending = false;
};
static_assert(kMaxOrderedKvPositions <= 65536, "positions are uint16_t");

// Ordered dQ, box policies: the KV tile positions [first, end) along one dimension that meet a Q tile
// position (fmha_backward_dq_order.hpp).
struct alignas(8) VisitorBounds {
  int32_t first;
  int32_t end;
};

struct FmhaBackwardParams {
  TensorAddress q, k, v, o, d_o, lse;
  TensorAddress d_q, d_k, d_v;
  TokenSpace q_space, kv_space;
  int32_t dims = 1;
  int32_t dilation[kMaxDims] = {1, 1, 1};
  WindowRule rule[kMaxDims]{};
  // Box policies: where the Q tiles a dK/dV CTA visits start (dim_query_tiles, KvBoxSchedule): window
  // unless the dQ additions follow the fixed order built on the grid's Q tiles (ordered_dq).
  KvTileOrigin q_tile_origins = KvTileOrigin::aligned;
  int32_t q_tiles[kMaxDims] = {1, 1, 1};   // per dimension, dilation group 0
  int32_t kv_tiles[kMaxDims] = {1, 1, 1};  // per dimension, dilation group 0
  int32_t total_q_tiles = 0;
  int32_t total_kv_tiles = 0;
  int32_t batch = 0;
  int32_t heads_q = 0;
  int32_t heads_kv = 0;
  int32_t heads_per_kv = 1;
  // KV heads one dK/dV CTA runs in turn (the Hopper tier with box policies, fmha_sm90_backward_dkdv.cuh):
  // blockIdx.y covers KV heads blockIdx.y * heads_per_cta on. 1 for every other kernel.
  int32_t heads_per_cta = 1;
  int32_t head_dim = 0;
  int32_t head_dim_v = 0;
  float scale = 0.f;
  float scale_log2 = 0.f;
  float* lse_log2 = nullptr;  // workspace, tile-row order
  float* delta = nullptr;     // workspace, tile-row order
  bool use_lists = false;
  BackwardTileLists list{};
  // dQ partials added with fp32 reductions inside the dK/dV kernel (a uniform runtime branch).
  bool accumulate_dq = false;
  // ... in a fixed order (the Hopper kernel's deterministic mode): the KV tiles meeting a Q tile take
  // turns; dq_turns (workspace, zeroed with dq_accum) counts the turns taken per (batch, query head, Q
  // tile), element (b * Hq + h) * total_q_tiles + q_tile; for tile lists dq_turn_table (workspace, filled
  // by rank_backward_rows_kernel) holds each (mask slice, Q tile, KV tile)'s rank, laid out as the
  // classes; for box policies visitor_bounds (workspace, fmha_backward_visitor_bounds_kernel) the range of
  // KV tiles meeting each Q tile position per dimension, from which a visit's rank follows.
  bool ordered_dq = false;
  uint32_t* dq_turns = nullptr;
  const uint32_t* dq_turn_table = nullptr;
  const VisitorBounds* visitor_bounds = nullptr;  // box policies: fmha_backward_dq_order.hpp
  // Contiguous fp32 [B, Sq, Hq, D] addressed like d_q (token strides row-major over the query extents);
  // data is set by the launcher (workspace).
  TensorAddress dq_accum{};
  // The preprocess kernel zeroes zero_fill[0, zero_fill_chunks) (dq_accum and dq_turns, 16 bytes a chunk)
  // before the dK/dV kernel adds into them: one launch fewer than a memset. Set by the launcher.
  void* zero_fill = nullptr;  // 16-byte aligned
  int64_t zero_fill_chunks = 0;
  // Small fast-mode problems (fmha_backward_dq_convert.cuh: fuses_dq_convert): the dK/dV CTAs count
  // themselves here (workspace, zeroed with zero_fill) and the last one converts dQ; null: the convert
  // kernel runs after the dK/dV kernel. Set by the launcher.
  uint32_t* dq_done = nullptr;
  // Neighborhood masks: the relative positional bias (addressed as the forward's, fmha_params.hpp; the
  // portable kernels add it to the recomputed scores) and, when its gradient is asked (grad_rpb.data set,
  // same addressing), the dK/dV kernel's partial sums of dS per entry (fmha_backward_positional_bias.cuh):
  // workspace, zeroed with zero_fill, row ((split * B + b) * Hq + query head) * total_kv_tiles + KV tile
  // of rpb_entries floats in dense entry order (the last dimension fastest).
  PositionalBias rpb{};
  PositionalBias grad_rpb{};
  float* rpb_partial = nullptr;
  int32_t rpb_entries = 0;
  // KV-parallel splitting (fmha_backward_split.hpp): kv_splits CTAs per KV tile, blockIdx.x = rank *
  // kv_splits + split (rank: the tile's place in kv_order). With kv_splits > 1 every CTA writes its unscaled fp32 dK
  // and dV to its slab of dk_partial / dv_partial (workspace, set by the launcher): element
  //   ((((split * B + b) * Hkv + h) * total_kv_tiles + tile) * BlockN + row) * partial_width + column
  // for all BlockN rows and partial_width (the compiled head dim) columns, and the reduce kernel sums them.
  int32_t kv_splits = 1;
  int32_t partial_width = 0;
  float* dk_partial = nullptr;
  float* dv_partial = nullptr;
  KvTileOrder kv_order{};
};

// Fast mode's dQ convert runs inside the dK/dV kernel (its last CTA, fmha_backward_dq_convert.cuh) when the
// accumulator of the Q tiles (block_m rows, the compiled head_dim columns) holds at most this many elements:
// one CTA converts them in about the time of the launch it saves.
inline constexpr int64_t kFusedDqConvertElements = int64_t{1} << 16;

inline bool fuses_dq_convert(const FmhaBackwardParams& p, int block_m, int head_dim) {
  return p.accumulate_dq &&
         static_cast<int64_t>(p.batch) * p.heads_q * p.total_q_tiles * block_m * head_dim <= kFusedDqConvertElements;
}

// Start of the fp32 partial slab of (split, batch, KV head, KV tile) in dk_partial / dv_partial.
ATTNKIT_HOST_DEVICE int64_t kv_partial_offset(const FmhaBackwardParams& p, int32_t split, int32_t batch,
                                              int32_t head_kv, int32_t tile, int block_n) {
  const int64_t slab =
      ((static_cast<int64_t>(split) * p.batch + batch) * p.heads_kv + head_kv) * p.total_kv_tiles + tile;
  return slab * block_n * p.partial_width;
}

// What the list builders read and write.
struct BackwardListBuildParams {
  TileMaskKind kind = TileMaskKind::block;
  const uint8_t* mask = nullptr;
  int64_t mask_stride[4] = {0, 0, 0, 0};
  int64_t block_q = 1;
  int64_t block_k = 1;
  int32_t seq_q = 0;
  int32_t seq_k = 0;
  int32_t q_tiles = 0;
  int32_t kv_tiles = 0;
  int32_t mask_batch = 1;
  int32_t mask_heads = 1;
  uint8_t* classes = nullptr;  // [mask_bh][q_tiles][kv_tiles]
  uint32_t* q_entries = nullptr;
  int32_t* q_counts = nullptr;
  uint32_t* kv_entries = nullptr;
  int32_t* kv_counts = nullptr;
  uint32_t* turn_table = nullptr;  // ordered dQ only: [mask_bh][q_tiles][kv_tiles], rank_backward_rows_kernel
  uint32_t* key_bits = nullptr;    // element masks only: BackwardTileLists::key_bits
};

}  // namespace attnkit::cuda::fmha
