// Kernel parameters of the scattered-sparse attention path (plain structs, shared by host and device):
// the addressing of a [B, *tokens, H, X] tensor by flat token index, and the forward and backward
// parameter blocks. Token indices, extents and head counts are int32 (the host checks the limits);
// element offsets are int64.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_SPARSE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ATTNKIT_SPARSE_HOST_DEVICE inline
#endif

namespace attnkit::cuda::sparse {

inline constexpr int kMaxSequenceDims = 3;

// A [B, *tokens, H, X] view (or LSE [B, *tokens, H]) addressed by (batch, flat token, head). When the
// token dims collapse into one stride, token_dims is 1 and token_stride[0] is that stride.
struct SequenceTensor {
  void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t token_stride[kMaxSequenceDims] = {0, 0, 0};
  int32_t extent[kMaxSequenceDims] = {1, 1, 1};
  int32_t token_dims = 1;

  ATTNKIT_SPARSE_HOST_DEVICE int64_t offset(int32_t batch, int32_t token, int32_t head) const {
    int64_t off = int64_t{batch} * batch_stride + int64_t{head} * head_stride;
    if (token_dims == 1) return off + int64_t{token} * token_stride[0];
    for (int d = token_dims - 1; d >= 0; --d) {
      off += int64_t{token % extent[d]} * token_stride[d];
      token /= extent[d];
    }
    return off;
  }
};

// The bit-packed mask: words[slice][row][words_per_row], bit c % 32 of word c / 32 set when row attends
// column c (bits past the last column are 0). slice = mask batch * mask_heads + mask head, where a
// broadcast dimension has one slice.
struct PackedMask {
  const uint32_t* words = nullptr;
  int32_t rows = 0;
  int32_t words_per_row = 0;
  int32_t mask_batches = 1;
  int32_t mask_heads = 1;

  ATTNKIT_SPARSE_HOST_DEVICE const uint32_t* row_words(int32_t batch, int32_t head, int32_t row) const {
    const int64_t slice = int64_t{mask_batches == 1 ? 0 : batch} * mask_heads + (mask_heads == 1 ? 0 : head);
    return words + (slice * rows + row) * words_per_row;
  }
};

// The union lists of a packed mask (built once per call by launch_build_tile_lists): for every mask slice,
// group of 16 rows and tile of tile_columns columns, the list of the columns any of the 16 rows attends,
// each entry (column in the tile | 16-bit row set << 16), padded with entries of empty row sets to a
// multiple of 16, in the bank-conflict-avoiding order of scattered_gather.cuh. entries[index][tile_columns]
// holds the list of index = (slice * groups + group) * tiles + tile, lengths[index] its padded length (a list
// never exceeds its tile). Slices follow PackedMask.
struct TileLists {
  const uint32_t* entries = nullptr;
  const uint32_t* lengths = nullptr;
  int32_t groups = 0;  // ceil(rows / 16)
  int32_t tiles = 0;   // ceil(columns / tile_columns)
  int32_t tile_columns = 0;
  int32_t mask_batches = 1;
  int32_t mask_heads = 1;

  ATTNKIT_SPARSE_HOST_DEVICE int64_t index(int32_t batch, int32_t head, int32_t group, int32_t tile) const {
    const int64_t slice = int64_t{mask_batches == 1 ? 0 : batch} * mask_heads + (mask_heads == 1 ? 0 : head);
    return (slice * groups + group) * tiles + tile;
  }
};

// The sizes both directions' parameter blocks carry.
struct ScatteredSizes {
  int32_t seq_q = 0;
  int32_t seq_k = 0;
  int32_t heads_q = 0;
  int32_t heads_per_kv = 1;
  int32_t head_dim = 0;
  int32_t head_dim_v = 0;
  float scale_log2 = 0.0f;  // softmax scale * log2(e)
};

struct ScatteredForwardParams : ScatteredSizes {
  SequenceTensor q, k, v, out, lse;  // lse.data nullptr: not written
  TileLists lists;                   // rows = queries, columns = keys
};

struct ScatteredBackwardParams : ScatteredSizes {
  SequenceTensor q, k, v, out, grad_out, lse, grad_q, grad_k, grad_v;
  TileLists lists;             // rows = queries, columns = keys
  TileLists lists_transposed;  // rows = keys, columns = queries
  // Workspace rows of length row_pitch per (batch, query head): lse * log2(e), and rowsum(dO * O).
  float* lse_log2 = nullptr;
  float* delta = nullptr;
  int32_t row_pitch = 0;
  int32_t batch = 0;
  float scale = 0.0f;
};

}  // namespace attnkit::cuda::sparse
