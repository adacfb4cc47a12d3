// Which tokens a tile holds, and the cp.async loads that gather them.
//
// A CTA owns one Q tile. Its linear block index (heaviest tiles first: reversed, so causal tiles with
// the most keys start early) is split into a dilation group and a tile position per dimension, last
// dimension fastest so that consecutive CTAs own neighbouring tiles and share KV tiles in L2. A tile
// is a TileOrigin (first index per dimension, and the dilation group); row r of the tile is mapped to
// a token by row_token() (see fmha_params.hpp for the box and decompose modes). Loads then gather the
// tile row by row from per-row element offsets: each thread copies fixed 16-byte chunks of
// kRowsPerPass-strided rows into the swizzled shared layout, with zero fill for rows past the extents
// and columns past D or Dv.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "core/neighborhood_window.hpp"
#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha {

struct TileOrigin {
  int32_t index[kMaxDims];  // box mode: first index per dimension (within the group); decompose: index[0] = first token
  int32_t group[kMaxDims];  // dilation group per dimension
};

struct CtaTile {
  TileOrigin q;
  int32_t q_tile[kMaxDims];  // tile position per dimension (within the group)
  int32_t n_q[kMaxDims];     // query indices per dimension in this group
  int32_t n_kv[kMaxDims];    // key indices per dimension in this group
  int32_t batch;
  int32_t head;
  bool valid;  // false: the group holds fewer tiles than group 0 and this one is past its end
};

// In-box coordinate along dimension d of row r of a box tile.
__device__ __forceinline__ int32_t in_box(const TokenSpace& space, int d, int r) {
  return (r >> space.box_shift[d]) & ((1 << space.box_log2[d]) - 1);
}

__device__ __forceinline__ int32_t indices_in_group(const TokenSpace& space, int d, int32_t dilation, int32_t group) {
  if (space.decompose) return d == 0 ? space.flat_extent : 1;
  if (dilation == 1) return space.extent[d];
  return static_cast<int32_t>(detail::dilation_group_size(space.extent[d], dilation, group));
}

__device__ __forceinline__ CtaTile resolve_cta(const FmhaParams& p) {
  CtaTile cta;
  int32_t x = p.total_q_tiles - 1 - static_cast<int32_t>(blockIdx.x);
  int32_t tile[kMaxDims];
  int32_t group[kMaxDims];
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {  // divisions by 1 (unused dimensions, no dilation) skipped
    tile[d] = 0;
    if (p.q_tiles[d] != 1) {
      tile[d] = x % p.q_tiles[d];
      x /= p.q_tiles[d];
    }
  }
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    group[d] = 0;
    if (p.dilation[d] != 1) {
      group[d] = x % p.dilation[d];
      x /= p.dilation[d];
    }
  }
  cta.valid = true;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    cta.q_tile[d] = tile[d];
    cta.q.index[d] = tile[d] << p.q_space.box_log2[d];
    cta.q.group[d] = group[d];
    cta.n_q[d] = indices_in_group(p.q_space, d, p.dilation[d], group[d]);
    cta.n_kv[d] = indices_in_group(p.kv_space, d, p.dilation[d], group[d]);
    cta.valid = cta.valid && cta.q.index[d] < cta.n_q[d];
  }
  cta.head = static_cast<int32_t>(blockIdx.y);
  cta.batch = static_cast<int32_t>(blockIdx.z);
  return cta;
}

struct RowToken {
  int32_t coord[kMaxDims];
  bool valid;
};

__device__ __forceinline__ RowToken row_token(const TokenSpace& space, const int32_t (&dilation)[kMaxDims],
                                              const TileOrigin& origin, int row) {
  RowToken t;
  if (!space.decompose) {
    t.valid = true;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      const int32_t in_box = (row >> space.box_shift[d]) & ((1 << space.box_log2[d]) - 1);
      const int32_t coord = (origin.index[d] + in_box) * dilation[d] + origin.group[d];
      t.valid = t.valid && coord < space.extent[d];
      t.coord[d] = coord;
    }
  } else {
    int32_t flat = origin.index[0] + row;
    t.valid = flat < space.flat_extent;
    t.coord[2] = flat % space.extent[2];
    flat /= space.extent[2];
    t.coord[1] = flat % space.extent[1];
    t.coord[0] = flat / space.extent[1];
  }
  return t;
}

__device__ __forceinline__ int64_t token_offset(const TensorAddress& a, const RowToken& t) {
  return static_cast<int64_t>(t.coord[0]) * a.token_stride[0] + static_cast<int64_t>(t.coord[1]) * a.token_stride[1] +
         static_cast<int64_t>(t.coord[2]) * a.token_stride[2];
}

// Shared-memory element offset of row `row` of a tile relative to row row % 8: the swizzle of the
// FmhaTraits layouts repeats every 8 rows and 8-row blocks are stacked linearly, so row r + 8k of a
// column sits a fixed distance after row r. Returns that distance for k = 1 (in elements).
template <class SmemLayout>
__device__ __forceinline__ constexpr int smem_stride_of_8_rows(const SmemLayout& layout) {
  return static_cast<int>(layout(cute::Int<8>{}, cute::Int<0>{})) -
         static_cast<int>(layout(cute::Int<0>{}, cute::Int<0>{}));
}

// Issues the cp.async copies of a Rows x HeadDim tile whose row r starts at row_start(r) (nullptr: the row
// is outside the extents and is zero-filled); columns >= valid_cols are zero-filled too. `fallback` is any
// mapped address, passed (never read) for zero-filled chunks.
template <class Traits, int Rows, class SmemLayout, class RowStart>
__device__ __forceinline__ void load_rows_async(typename Traits::Element* smem, const SmemLayout& layout,
                                                const void* fallback, const RowStart& row_start, int valid_cols,
                                                int tid) {
  using Element = typename Traits::Element;
  constexpr int kElementsPerChunk = 16 / int(sizeof(Element));
  const int col = (tid % Traits::kChunksPerRow) * kElementsPerChunk;
  const int first_row = tid / Traits::kChunksPerRow;
  const bool col_valid = col < valid_cols;
  // Rows of one thread are kRowsPerPass apart; when that is a multiple of 8 their shared addresses are
  // a compile-time distance apart (one address computation instead of one per row). Layouts whose
  // swizzle acts on byte addresses (the GMMA atoms of the Hopper tier, Traits::kAddressSwizzle) are
  // only evaluated through a tensor on the shared pointer: the layout function itself is not the address.
  constexpr bool kAddressSwizzle = requires { Traits::kAddressSwizzle; };
  constexpr bool kLinearPasses = Traits::kRowsPerPass % 8 == 0 && !kAddressSwizzle;
  static_assert(Rows % Traits::kRowsPerPass == 0, "passes must cover whole tiles");
  auto tile = cute::make_tensor(cute::make_smem_ptr(smem), layout);
  const uint32_t first_destination =
      kAddressSwizzle ? shared_address(&tile(first_row, col)) : shared_address(smem + layout(first_row, col));
#pragma unroll
  for (int pass = 0; pass < Rows / Traits::kRowsPerPass; ++pass) {
    const int row = first_row + pass * Traits::kRowsPerPass;
    const Element* start = row_start(row);
    const bool valid = start != nullptr && col_valid;
    const void* source = valid ? static_cast<const void*>(start + col) : fallback;
    uint32_t destination;
    if constexpr (kLinearPasses) {
      constexpr int kPassStride = smem_stride_of_8_rows(SmemLayout{}) * (Traits::kRowsPerPass / 8);
      destination = first_destination + pass * kPassStride * int(sizeof(Element));
    } else if constexpr (kAddressSwizzle) {
      destination = shared_address(&tile(row, col));
    } else {
      destination = shared_address(smem + layout(row, col));
    }
    copy_16_bytes_async(destination, source, valid);
  }
}

// Start of row `row` of a tile of tensor `a` (batch and head offset included), or nullptr outside the extents.
template <class Element>
__device__ __forceinline__ const Element* tile_row_start(const TensorAddress& a, int64_t head_offset,
                                                         const TokenSpace& space, const int32_t (&dilation)[kMaxDims],
                                                         const TileOrigin& origin, int row) {
  const RowToken t = row_token(space, dilation, origin, row);
  return t.valid ? static_cast<const Element*>(a.data) + head_offset + token_offset(a, t) : nullptr;
}

}  // namespace attnkit::cuda::fmha
