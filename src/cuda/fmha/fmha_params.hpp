// Params of the portable fused-attention forward kernel: the plain, trivially copyable struct the
// kernel receives by value (a __grid_constant__ parameter), built on the host from the validated
// problem (Arguments = AttentionForward + AttentionShape) by make_fmha_params() in fmha_arguments.cpp.
//
// Tiles are boxes of tokens. Each side (queries, keys/values) has a TokenSpace saying how row r of a
// tile maps to a token:
//   box mode       the tile is a box of 2^box_log2[d] indices per dimension d (the last dimension
//                  fastest); index i of dilation group g is coordinate i*dilation + g, valid while
//                  below extent[d]. Neighborhood masks use it on the token grid; flat masks (none,
//                  causal, block, element) use it with one dimension over the flattened sequence
//                  when the tensor's token strides collapse into one.
//   decompose mode flat masks over several token dims whose strides do not collapse: row r of the
//                  tile is flat token origin + r, split into coordinates by the token extents.
// Element offsets are then sum(coordinate[d] * token_stride[d]) + batch and head terms, per tensor.
#pragma once
#include <cstdint>

#include "cuda/common/tile_range.hpp"

namespace attnkit::cuda::fmha {

constexpr int kMaxDims = 3;

struct TensorAddress {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t token_stride[kMaxDims] = {0, 0, 0};
};

struct TokenSpace {
  int32_t extent[kMaxDims] = {1, 1, 1};
  int32_t box_log2[kMaxDims] = {0, 0, 0};
  int32_t box_shift[kMaxDims] = {0, 0, 0};  // sum of box_log2 of the dimensions after d
  int32_t flat_extent = 1;                  // decompose mode: tokens in the sequence
  bool decompose = false;
};

// Tile lists built by the preprocessing kernels for block and element masks (TileListPolicy).
// entries[(mask_bh * q_tiles + q_tile) * kv_tiles + i], i < counts[mask_bh * q_tiles + q_tile], each
// kv_tile | kEntryPartial | kEntryHasBits. A partial tile always masks keys past the sequence end; with
// kEntryHasBits it also applies its element bits: words w of thread t at
// bits[(((mask_bh * q_tiles + q_tile) * kv_tiles + kv_tile) * words + w) * threads + t].
struct TileListArgs {
  const uint32_t* entries = nullptr;
  const int32_t* counts = nullptr;
  const uint32_t* bits = nullptr;
  int32_t q_tiles = 0;
  int32_t kv_tiles = 0;
  int32_t mask_batch = 1;  // 1: the mask broadcasts over the batch
  int32_t mask_heads = 1;  // 1: the mask broadcasts over the heads
};

constexpr uint32_t kEntryTileMask = (1u << 30) - 1u;
constexpr uint32_t kEntryPartial = 1u << 30;
constexpr uint32_t kEntryHasBits = 1u << 31;

// Relative positional bias of a neighborhood mask (AttentionMask::rpb, [Hq, 2K_0-1, ...]): the score of
// query index q and key index k (per dimension, in their dilation group) gets the entry at element offset
//   head * head_stride + sum_d (k_d - q_d + K_d - 1) * stride[d]   (fmha_positional_bias.cuh).
enum class BiasType : int32_t { f32 = 0, f16 = 1, bf16 = 2 };
struct PositionalBias {
  const void* data = nullptr;  // nullptr: no bias
  BiasType type = BiasType::f32;
  int32_t head_stride = 0;
  int32_t stride[kMaxDims] = {0, 0, 0};
  int32_t kernel_size[kMaxDims] = {1, 1, 1};
  int32_t max_offset = 0;  // of the last entry: offsets are clamped to [0, max_offset]
};

struct FmhaParams {
  TensorAddress q, k, v, o;
  TensorAddress lse;  // data == nullptr: LSE is not written (head/batch/token strides in elements)
  TokenSpace q_space, kv_space;
  int32_t dims = 1;  // dimensions of the window space (1 for flat masks)
  int32_t dilation[kMaxDims] = {1, 1, 1};
  WindowRule rule[kMaxDims]{};
  int32_t q_tiles[kMaxDims] = {1, 1, 1};  // Q tiles per dilation group along each dimension (of group 0)
  int32_t total_q_tiles = 0;              // grid.x: prod(dilation) * prod(q_tiles)
  int32_t batch = 0;
  int32_t heads_q = 0;
  int32_t heads_per_kv = 1;   // Hq / Hkv (GQA / MQA)
  int32_t heads_per_cta = 1;  // Hopper forward: query heads blockIdx.y * heads_per_cta + j a CTA runs in turn
  int32_t head_dim = 0;       // D: Q and K columns loaded (the rest of the compiled width is zero)
  int32_t head_dim_v = 0;     // Dv: V columns loaded and O columns stored
  float scale_log2 = 0.f;     // softmax scale * log2(e)
  TileListArgs list{};
  PositionalBias rpb{};  // neighborhood masks only
};

// What the tile-list preprocessing reads and writes (fmha_tile_list_build.cuh).
enum class TileMaskKind : int32_t { block = 0, element = 1 };

struct TileListBuildParams {
  TileMaskKind kind = TileMaskKind::block;
  const uint8_t* mask = nullptr;          // bool [mask_batch, mask_heads, rows, cols]
  int64_t mask_stride[4] = {0, 0, 0, 0};  // in elements (bytes)
  int64_t block_q = 1;                    // block masks: tokens per block
  int64_t block_k = 1;
  int32_t seq_q = 0;
  int32_t seq_k = 0;
  int32_t q_tiles = 0;
  int32_t kv_tiles = 0;
  int32_t mask_batch = 1;
  int32_t mask_heads = 1;
  bool blocks_align_with_tiles = false;  // block masks: block_q % BlockM == 0 and block_k % BlockN == 0
  uint8_t* classes = nullptr;
  uint32_t* entries = nullptr;
  int32_t* counts = nullptr;
  uint32_t* bits = nullptr;  // null when no tile can need element bits
};

}  // namespace attnkit::cuda::fmha
