// Forward kernel of the scattered-sparse path: gathered tensor-core attention over a bit-packed mask.
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head); each warp owns 16 of them as two
// groups of 8 and keeps, per group, Q^T as mma B fragments, the fp32 accumulator of O^T and the running max /
// sum in registers. The CTA streams the keys of its KV head in tiles of Tile keys (K and V staged with cp.async,
// two stages; a tile none of the CTA's rows attends is neither loaded nor walked: stream_tiles_and_lists). Per
// tile each warp copies the pre-pass's lists of the unions U of the keys each of its groups attends
// (EightRowTileLists: 16-bit entries, padded to 8; built once per mask slice, not per head) next to the tile and
// walks each group's list 16 keys at a time, with the keys as the mma's M dimension: S^T = K_U Q^T (ldmatrix of
// the gathered K rows as A, m16n8k16: 16 keys x 8 queries), entries whose bit is clear set to -inf, online
// softmax in base 2 (a query's scores lie in one lane column: max and sum reduce over the 8 lanes of g), P^T
// re-laid from the C fragment into the B fragment by two movmatrix (an 8 x 8 transpose each), O^T += V_U^T P^T
// (the gathered V rows loaded transposed as A). A list whose length is an odd multiple of 8 ends with a step of
// 8 keys (m16n8k16 with zero rows for S^T, m16n8k8 for O^T). O^T is transposed back by movmatrix for the store.
// A row without any key ends with O = 0 and LSE = -inf.
//
// Counts per (batch, head) and per (16 query rows, tile), from a random broadcast mask plus its diagonal at
// Sq = Sk = 8192, tile 256 (D 64): at 1 % an 8-row union holds 20.0 keys (23.5 entries padded to 8), a 16-row
// union 38.5 (46.3 padded to 16); so a warp takes 2.31 steps of 16 keys x 8 queries and 1.26 of 8 x 8 per tile
// where unions of 16 rows would take 2.89 of 16 x 16: 0.51x the score slots (most of them masked either way, the price
// of keeping the warp in lockstep), 0.56x the mma FLOPs, 1.02x the shared-memory reads (2 (D + Dv) bytes per listed key
// and group: the two groups' unions barely overlap), half the list bytes (2 per entry). At 0.1 % (mostly 8-key steps)
// 0.65x the FLOPs and 0.89x the reads, at 3 % 0.57x and 1.11x. L2 -> shared traffic (Sq / (16 Warps)) Sk 2 (D + Dv)
// bytes (every CTA reads its whole KV head once): 1.07 GB at 1 %, H 16, D = Dv = 64, Warps 16 (the bound on H100).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_group_steps.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

template <int Width>
inline constexpr int kScatteredTile = Width <= 64 ? 256 : 128;

// The shape every scattered kernel shares: Warps warps of 16 rows, tiles of kTile columns staged as
// [kTile][Width] elements, and two list buffers of kListEntries entries per warp (a padded list never
// exceeds its tile).
template <int Width, int Warps>
struct ScatteredTileShape {
  static constexpr int kTile = kScatteredTile<Width>;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kRows = Warps * 16;
  static constexpr int kListEntries = kTile;
  static constexpr int kTileElements = kTile * Width;
};

template <class Element, int Width, int Warps>
struct ScatteredForwardTraits : ScatteredTileShape<Width, Warps> {
  using Shape = ScatteredTileShape<Width, Warps>;
  static constexpr int kSharedBytes =
      2 * 2 * Shape::kTileElements * int(sizeof(Element)) + Warps * 2 * Shape::kListEntries * 4;
};

template <class Element, int Width, int Warps>
__global__ void __launch_bounds__(Warps * 32, 1) scattered_forward_kernel(const ScatteredForwardParams p) {
  using Traits = ScatteredForwardTraits<Element, Width, Warps>;
  constexpr int kTile = Traits::kTile;
  constexpr int kTileElements = Traits::kTileElements;
  extern __shared__ __align__(128) unsigned char shared[];
  Element* tiles = reinterpret_cast<Element*>(shared);  // [stage][K, V][kTile][Width]
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int lane = thread % 32;
  // [stage][group][kTile] 16-bit entries: both groups' lists of a tile fill one stage's kTile words.
  uint32_t* lists = reinterpret_cast<uint32_t*>(tiles + 4 * kTileElements) + warp * 2 * Traits::kListEntries;

  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t kv_head = head / p.heads_per_kv;
  const int32_t first_row = static_cast<int32_t>(blockIdx.x) * Traits::kRows + warp * 16;
  const int g = lane / 4;
  const int t = lane % 4;

  // Per group of 8 queries: Q^T as B fragments, O^T (Width x 8) as C fragments of 16 value columns, and the
  // running max / sum of the lane's two queries 2t and 2t + 1 (index j).
  uint32_t q[2][Width / 16][2];
  float acc[2][Width / 16][4];
  float row_max[2][2];
  float row_sum[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    load_b_fragments<Element, Width>(q[h], p.q, batch, head, first_row + 8 * h, p.seq_q, p.head_dim, lane);
#pragma unroll
    for (int i = 0; i < Width / 16; ++i) acc[h][i][0] = acc[h][i][1] = acc[h][i][2] = acc[h][i][3] = 0.0f;
    row_max[h][0] = row_max[h][1] = -INFINITY;
    row_sum[h][0] = row_sum[h][1] = 0.0f;
  }

  // One step of group h over the 16 (Half: 8) list entries at `step_list`.
  auto step = [&](auto group, auto half, uint32_t k_address, uint32_t v_address, const uint16_t* step_list) {
    constexpr int h = decltype(group)::value;
    constexpr bool kHalf = decltype(half)::value;
    float s[4];
    group_scores<Element, Width, kHalf>(s, q[h], k_address, step_list, lane);
    uint32_t entries[2];
    group_step_entries<kHalf>(entries, step_list, lane);
    float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[i] = group_value_attended(entries, i, lane) ? s[i] * p.scale_log2 : -INFINITY;
      block_max[i & 1] = fmaxf(block_max[i & 1], s[i]);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        block_max[j] = fmaxf(block_max[j], __shfl_xor_sync(kFullWarp, block_max[j], offset));
      }
    }
    float base[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float new_max = fmaxf(row_max[h][j], block_max[j]);
      base[j] = new_max == -INFINITY ? 0.0f : new_max;
      if (new_max > row_max[h][j]) {
        const float rescale = fast_exp2(row_max[h][j] - new_max);
        row_sum[h][j] *= rescale;
#pragma unroll
        for (int i = 0; i < Width / 16; ++i) {
          acc[h][i][j] *= rescale;
          acc[h][i][2 + j] *= rescale;
        }
        row_max[h][j] = new_max;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[i] = fast_exp2(s[i] - base[i & 1]);
      row_sum[h][i & 1] += s[i];
    }
    group_accumulate<Element, Width, kHalf>(acc[h], s, v_address, step_list, lane);
  };
  stream_key_value_group_steps<Element, Width, kTile, Traits::kThreads>(tiles, lists, p, batch, head, kv_head,
                                                                        first_row, thread, lane, step);

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float inverse[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        row_sum[h][j] += __shfl_xor_sync(kFullWarp, row_sum[h][j], offset);
      }
      inverse[j] = row_sum[h][j] > 0.0f ? 1.0f / row_sum[h][j] : 0.0f;
    }
    store_group_fragments<Element, Width>(acc[h], p.out, batch, head, first_row + 8 * h, p.seq_q, p.head_dim_v, inverse,
                                          lane);
    if (p.lse.data != nullptr && g == 0) {
      float* lse = static_cast<float*>(p.lse.data);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int32_t query = first_row + 8 * h + 2 * t + j;
        if (query >= p.seq_q) continue;
        lse[p.lse.offset(batch, query, head)] =
            row_sum[h][j] > 0.0f ? (row_max[h][j] + log2f(row_sum[h][j])) * 0.69314718055994531f : -INFINITY;
      }
    }
  }
}

}  // namespace attnkit::cuda::sparse
