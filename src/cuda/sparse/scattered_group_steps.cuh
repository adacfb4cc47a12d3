// The walk of the forward and dQ kernels over the unions of groups of 8 query rows (EightRowTileLists), with the
// listed keys as the MMA's M dimension.
//
// A warp owns 16 query rows as two groups of 8; per staged K / V tile it walks each group's list (16-bit entries:
// key in the tile | 8-bit row set << 8, padded to a multiple of 8) in steps of 16 keys, and a last step of 8 keys
// when the length is an odd multiple of 8. A step computes a product of the gathered key rows with the group's
// 8 rows, X_U Y^T (16 keys x 8 queries; Y^T held as mma B fragments), whose C fragment gives lane (g, t) keys g
// and g + 8 of queries 2t and 2t + 1: a query's values lie in one lane column, so its reductions run over the 8
// lanes of g. A C block of 8 keys x 8 queries packed to 16 bits becomes the B fragment (k = keys, n = queries) of
// the next product, acc^T += Z_U^T P^T (Z's gathered rows loaded transposed as A), by one movmatrix. Per 16-key
// step and Width 64: 4 ldmatrix.x4 and 4 mma m16n8k16 per product, 2 movmatrix.
#pragma once
#include <cstdint>
#include <type_traits>

#include "cuda/sparse/scattered_fragments.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

// S^T (16 keys x 8 queries) = X_U Y^T, X's listed rows in a staged tile, Y^T as B fragments of k-steps of 16
// columns: s0 s1 (key g, queries 2t, 2t + 1), s2 s3 (key g + 8, ...). Even and odd k-steps accumulate in two
// registers sets (two dependent mma chains of half the length). Half: 8 listed keys, keys 8..15 zero rows.
template <class Element, int Width, bool Half>
__device__ __forceinline__ void group_scores(float (&s)[4], const uint32_t (&b)[Width / 16][2], uint32_t tile_address,
                                             const uint16_t* step_list, int lane) {
  float odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  s[0] = s[1] = s[2] = s[3] = 0.0f;
  if constexpr (!Half) {
    const uint32_t entry = step_list[(lane & 7) + ((lane >> 3) & 1) * 8] & 0xffu;
#pragma unroll
    for (int k = 0; k < Width / 16; ++k) {
      uint32_t a[4];
      load_matrix_x4(a, gathered_row_address<Element, Width>(tile_address, entry, 2 * k + (lane >> 4)));
      mma_16816<Element>(k % 2 == 0 ? s : odd, a, b[k][0], b[k][1]);
    }
  } else {
    const uint32_t entry = step_list[lane & 7] & 0xffu;
#pragma unroll
    for (int pass = 0; pass < Width / 32; ++pass) {
      uint32_t a[4];
      load_matrix_x4(a, gathered_row_address<Element, Width>(tile_address, entry, 4 * pass + (lane >> 3)));
      const uint32_t first[4] = {a[0], 0u, a[1], 0u};
      const uint32_t second[4] = {a[2], 0u, a[3], 0u};
      mma_16816<Element>(s, first, b[2 * pass][0], b[2 * pass][1]);
      mma_16816<Element>(odd, second, b[2 * pass + 1][0], b[2 * pass + 1][1]);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) s[i] += odd[i];
}

// The list entries of the lane's two keys of a step (g and g + 8; 0, no row, for key g + 8 of a half step).
template <bool Half>
__device__ __forceinline__ void group_step_entries(uint32_t (&entries)[2], const uint16_t* step_list, int lane) {
  entries[0] = step_list[lane / 4];
  entries[1] = Half ? 0u : uint32_t{step_list[lane / 4 + 8]};
}

// Whether C value i (0..3) of a step's S^T is attended: its key's entry holds its query's row bit.
__device__ __forceinline__ bool group_value_attended(const uint32_t (&entries)[2], int i, int lane) {
  return (entries[i >> 1] >> (EightRowTileLists::kRowSetShift + 2 * (lane % 4) + (i & 1))) & 1u;
}

// acc^T (Width x 8 queries, C fragments of 16 columns) += Z_U^T P^T, Z's listed rows in a staged tile, P^T
// (keys x queries) in C layout: p[0..1] keys 0..7, p[2..3] keys 8..15 (ignored when Half).
template <class Element, int Width, bool Half>
__device__ __forceinline__ void group_accumulate(float (&acc)[Width / 16][4], const float (&p)[4],
                                                 uint32_t tile_address, const uint16_t* step_list, int lane) {
  const uint32_t b0 = transpose_matrix(pack_pair<Element>(p[0], p[1]));
  if constexpr (!Half) {
    const uint32_t b1 = transpose_matrix(pack_pair<Element>(p[2], p[3]));
    const uint32_t entry = step_list[(lane & 7) + (lane >> 4) * 8] & 0xffu;
#pragma unroll
    for (int i = 0; i < Width / 16; ++i) {
      uint32_t a[4];
      load_matrix_x4_transposed(a,
                                gathered_row_address<Element, Width>(tile_address, entry, 2 * i + ((lane >> 3) & 1)));
      mma_16816<Element>(acc[i], a, b0, b1);
    }
  } else {
    const uint32_t entry = step_list[lane & 7] & 0xffu;
#pragma unroll
    for (int pass = 0; pass < Width / 32; ++pass) {
      uint32_t a[4];
      load_matrix_x4_transposed(a, gathered_row_address<Element, Width>(tile_address, entry, 4 * pass + (lane >> 3)));
      mma_1688<Element>(acc[2 * pass], a[0], a[1], b0);
      mma_1688<Element>(acc[2 * pass + 1], a[2], a[3], b0);
    }
  }
}

// The pipeline of the forward and dQ kernels: streams the K and V tiles of KV head `kv_head` through two stages
// at `tiles` ([stage][K, V][Tile][Width], stream_tiles_and_lists) and calls step(group, half, k_address,
// v_address, step_list) for every step of the warp's two groups' lists of each walked tile (group: an
// integral_constant 0 or 1; half: true_type for a last step of 8 keys). The warp's rows start at `first_row`
// (a multiple of 16); a group past the last row has empty lists. The warp's list buffer of a stage holds the
// two groups' lists, Tile 16-bit entries each.
template <class Element, int Width, int Tile, int Threads, class Params, class Step>
__device__ __forceinline__ void stream_key_value_group_steps(Element* tiles, uint32_t* lists, const Params& p,
                                                             int32_t batch, int32_t head, int32_t kv_head,
                                                             int32_t first_row, int thread, int lane,
                                                             const Step& step) {
  constexpr int kTileElements = Tile * Width;
  const EightRowTileLists& l = p.lists;
  auto stage = [&](int tile) {
    stage_key_value_async<Element, Width, Tile, Threads>(tiles + (tile & 1) * 2 * kTileElements, p, batch, kv_head,
                                                         tile * Tile, thread);
  };
  const int tiles_k = (p.seq_k + Tile - 1) / Tile;
  const int32_t first_group = first_row / 8;
  const bool has_rows[2] = {first_group < l.groups, first_group + 1 < l.groups};
  const int64_t first_list[2] = {has_rows[0] ? l.index(batch, head, first_group, 0) : 0,
                                 has_rows[1] ? l.index(batch, head, first_group + 1, 0) : 0};
  // Both groups' lengths in one value: group 0 in bits 0..15, group 1 above (a length is at most Tile).
  auto length_of = [&](int tile) {
    const int first = has_rows[0] ? static_cast<int>(l.lengths[first_list[0] + tile]) : 0;
    const int second = has_rows[1] ? static_cast<int>(l.lengths[first_list[1] + tile]) : 0;
    return first | (second << 16);
  };
  auto copy_list = [&](int tile, int lengths, uint32_t destination) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int length = h == 0 ? lengths & 0xffff : lengths >> 16;
      const uint16_t* source = l.entries + (first_list[h] + tile) * Tile;
      const uint32_t group_destination = destination + h * Tile * 2;
      for (int chunk = lane; chunk * 8 < length; chunk += 32) {
        copy_16_bytes_async(group_destination + chunk * 16, source + chunk * 8, true);
      }
    }
  };
  auto walk_group = [&](auto group, const uint16_t* list, int length, uint32_t k_address, uint32_t v_address) {
    int offset = 0;
    for (; offset + 16 <= length; offset += 16) step(group, std::false_type{}, k_address, v_address, list + offset);
    if (offset < length) step(group, std::true_type{}, k_address, v_address, list + offset);  // 8 entries left
  };
  auto walk = [&](int tile, const uint32_t* buffer, int lengths) {
    const uint32_t k_address = shared_address(tiles + (tile & 1) * 2 * kTileElements);
    const uint32_t v_address = k_address + kTileElements * int(sizeof(Element));
    const auto* group_lists = reinterpret_cast<const uint16_t*>(buffer);
    walk_group(std::integral_constant<int, 0>{}, group_lists, lengths & 0xffff, k_address, v_address);
    walk_group(std::integral_constant<int, 1>{}, group_lists + Tile, lengths >> 16, k_address, v_address);
  };
  stream_tiles_and_lists<Tile>(tiles_k, lists, stage, length_of, copy_list, walk);
}

// Writes acc^T (Width columns x 8 queries, C fragments of 16 columns) of queries first_row .. first_row + 7,
// query 2t + j times factor[j], into a [B, *tokens, H, X] tensor: rows below `rows`, columns below `columns` (a
// multiple of 8). Each 8 x 8 block is transposed back by movmatrix: lane (g, t) then holds query g, columns 2t
// and 2t + 1 of the block.
template <class Element, int Width>
__device__ __forceinline__ void store_group_fragments(const float (&acc)[Width / 16][4], const SequenceTensor& tensor,
                                                      int32_t batch, int32_t head, int32_t first_row, int32_t rows,
                                                      int32_t columns, const float (&factor)[2], int lane) {
  const int32_t row = first_row + lane / 4;
  Element* base = static_cast<Element*>(tensor.data);
  Element* row_out = row < rows ? base + tensor.offset(batch, row, head) : nullptr;
#pragma unroll
  for (int i = 0; i < Width / 16; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t pair =
          transpose_matrix(pack_pair<Element>(acc[i][2 * half] * factor[0], acc[i][2 * half + 1] * factor[1]));
      const int column = 16 * i + 8 * half + 2 * (lane % 4);
      if (row_out != nullptr && column < columns) *reinterpret_cast<uint32_t*>(row_out + column) = pair;
    }
  }
}

}  // namespace attnkit::cuda::sparse
