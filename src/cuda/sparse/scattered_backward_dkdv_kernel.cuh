// dK/dV kernel of the scattered-sparse backward: the dQ kernel's walk with keys and queries swapped.
//
// Algorithm. A CTA owns Warps x 16 keys of one (batch, KV head); a warp keeps K and V fragments of its 16 keys
// and fp32 dK and dV accumulators in registers (ScatteredKeyRows). For each query head of the KV head's group (GQA)
// the CTA streams that head's queries in tiles: Q and dO rows plus their lse (base 2) and delta (cp.async, two
// stages; on sm_90 at width 64 a producer warp stages them with TMA instead, scattered_tma_pipeline.cuh). The warp
// copies the pre-pass's list of the union of the queries its 16 keys are attended by (the key-major TileLists)
// next to the tile and per 16 listed queries: S^T = K Q_U^T, P^T = exp2(S^T * scale log2 e - lse2[query]) on
// attended entries, dP^T = V dO_U^T, dS^T = P^T (dP^T - delta[query]), dV += P^T dO_U and dK += dS^T Q_U (the
// gathered rows loaded transposed). dK is scaled at the end; both are written in the input dtype. Every key has
// one owner, so the result is deterministic without atomics.
//
// Counts per (batch, KV head), summed over its query heads, with u the union fraction of 16 keys:
// mma FLOPs 2 Sq Sk u (2 D + 2 Dv); shared reads 4 (D + Dv) bytes per union query and warp; L2 -> shared
// (Sk / (16 Warps)) Sq (2 (D + Dv) + 8) bytes per query head.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/fast_divisor.hpp"
#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

template <class Element, int Width, int Warps>
struct ScatteredKeyTraits : ScatteredTileShape<Width, Warps> {
  using Shape = ScatteredTileShape<Width, Warps>;
  // Per stage: Q tile, dO tile, lse2[kTile], delta[kTile].
  static constexpr int kStageBytes = 2 * Shape::kTileElements * int(sizeof(Element)) + 2 * Shape::kTile * 4;
  static constexpr int kSharedBytes = 2 * kStageBytes + Warps * 2 * Shape::kListEntries * 4;
};

// The work items of a dK/dV CTA: (query head of the KV head's group, query tile), the tile fastest, and the index of
// the key group's list of each (the next head's lists follow groups * tiles lists later; none later for a mask
// broadcast over heads).
struct ScatteredKeyItems {
  int tiles_q;
  int items;
  FastDivisor per_head;
  int64_t first_list;
  int64_t head_step;

  __device__ __forceinline__ ScatteredKeyItems(const ScatteredBackwardParams& p, int tile, int32_t batch,
                                               int32_t kv_head, int32_t group, bool has_keys)
      : tiles_q((p.seq_q + tile - 1) / tile),
        items(tiles_q * p.heads_per_kv),
        per_head(static_cast<uint32_t>(tiles_q > 0 ? tiles_q : 1)),
        first_list(has_keys ? p.lists_transposed.index(batch, kv_head * p.heads_per_kv, group, 0) : 0),
        head_step(p.lists_transposed.mask_heads == 1 ? 0 : int64_t{p.lists_transposed.groups} * tiles_q) {}

  __device__ __forceinline__ int head_of(int item) const {
    return static_cast<int>(per_head.quotient(static_cast<uint32_t>(item)));
  }
  __device__ __forceinline__ int tile_of(int item, int head_in_group) const { return item - head_in_group * tiles_q; }
  __device__ __forceinline__ int64_t list_index(int item) const {
    const int head_in_group = head_of(item);
    return first_list + head_in_group * head_step + tile_of(item, head_in_group);
  }
};

// A warp's 16 keys: K and V fragments, the fp32 dK and dV accumulators; the step of the file comment over 16 listed
// queries of a staged Q / dO tile with their lse2 and delta in shared memory.
template <class Element, int Width>
struct ScatteredKeyRows {
  uint32_t k[Width / 16][4];
  uint32_t v[Width / 16][4];
  float grad_k[Width / 8][4];
  float grad_v[Width / 8][4];

  __device__ __forceinline__ void load(const ScatteredBackwardParams& p, int32_t batch, int32_t kv_head,
                                       int32_t first_key, int lane) {
    load_a_fragments<Element, Width>(k, p.k, batch, kv_head, first_key, p.seq_k, p.head_dim, lane);
    load_a_fragments<Element, Width>(v, p.v, batch, kv_head, first_key, p.seq_k, p.head_dim_v, lane);
    zero_c_fragments<Width>(grad_k);
    zero_c_fragments<Width>(grad_v);
  }

  __device__ __forceinline__ void step(float scale_log2, uint32_t q_address, uint32_t grad_out_address,
                                       const float* lse2, const float* delta, const StepEntries& entries, int lane) {
    // The lse2 and delta of the lane's four query columns (n-block 0: x, y; n-block 1: z, w), loaded for
    // every column before the products, so that their latency hides behind them.
    const uint32_t columns[4] = {entries.columns.x, entries.columns.y, entries.columns.z, entries.columns.w};
    float column_lse2[4];
    float column_delta[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      column_lse2[c] = lse2[columns[c] & 0xffffu];
      column_delta[c] = delta[columns[c] & 0xffffu];
    }
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float dp[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    gathered_scores<Element, Width>(s, k, q_address, entries, lane);
    gathered_scores<Element, Width>(dp, v, grad_out_address, entries, lane);
    for_each_step_entry(entries, lane, [&](int block, int i, bool attended) {
      const int column = 2 * block + (i & 1);
      const float probability = attended ? fast_exp2(fmaf(s[block][i], scale_log2, -column_lse2[column])) : 0.0f;
      s[block][i] = probability;
      dp[block][i] = probability * (dp[block][i] - column_delta[column]);
    });
    uint32_t probabilities[4];
    uint32_t grad_scores[4];
    pack_a_fragment<Element>(probabilities, s);
    pack_a_fragment<Element>(grad_scores, dp);
    gathered_accumulate<Element, Width>(grad_v, probabilities, grad_out_address, entries, lane);
    gathered_accumulate<Element, Width>(grad_k, grad_scores, q_address, entries, lane);
  }

  // Writes dK (times the softmax scale) and dV in the input dtype.
  __device__ __forceinline__ void store(const ScatteredBackwardParams& p, int32_t batch, int32_t kv_head,
                                        int32_t first_key, int lane) {
    store_c_fragments<Element, Width>(grad_k, p.grad_k, batch, kv_head, first_key, p.seq_k, p.head_dim, p.scale,
                                      p.scale, lane);
    store_c_fragments<Element, Width>(grad_v, p.grad_v, batch, kv_head, first_key, p.seq_k, p.head_dim_v, 1.0f, 1.0f,
                                      lane);
  }
};

template <class Element, int Width, int Warps>
__global__ void __launch_bounds__(Warps * 32, 1) scattered_backward_dkdv_kernel(const ScatteredBackwardParams p) {
  using Traits = ScatteredKeyTraits<Element, Width, Warps>;
  constexpr int kTile = Traits::kTile;
  extern __shared__ __align__(256) unsigned char shared[];  // tiles at multiples of their row size
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int lane = thread % 32;
  uint32_t* lists = reinterpret_cast<uint32_t*>(shared + 2 * Traits::kStageBytes) + warp * 2 * Traits::kListEntries;
  auto q_tile = [&](int stage) { return reinterpret_cast<Element*>(shared + stage * Traits::kStageBytes); };
  auto floats = [&](int stage) {
    return reinterpret_cast<float*>(shared + stage * Traits::kStageBytes + 2 * Traits::kTileElements * sizeof(Element));
  };

  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int32_t first_key = static_cast<int32_t>(blockIdx.x) * Traits::kRows + warp * 16;
  const int32_t group = first_key / 16;
  const bool has_keys = group < p.lists_transposed.groups;
  ScatteredKeyRows<Element, Width> rows;
  rows.load(p, batch, kv_head, first_key, lane);
  const ScatteredKeyItems work(p, kTile, batch, kv_head, group, has_keys);

  auto stage = [&](int item) {
    const int head_in_group = work.head_of(item);
    const int32_t head = kv_head * p.heads_per_kv + head_in_group;
    const int32_t first = work.tile_of(item, head_in_group) * kTile;
    Element* tile = q_tile(item & 1);
    stage_tile_async<Element, Width, kTile, Traits::kThreads>(tile, p.q, batch, head, first, p.seq_q, p.head_dim,
                                                              thread);
    stage_tile_async<Element, Width, kTile, Traits::kThreads>(tile + Traits::kTileElements, p.grad_out, batch, head,
                                                              first, p.seq_q, p.head_dim_v, thread);
    const int64_t row_base = (int64_t{batch} * p.heads_q + head) * p.row_pitch;
    stage_floats_async<kTile, Traits::kThreads>(floats(item & 1), p.lse_log2 + row_base, first, p.seq_q, thread);
    stage_floats_async<kTile, Traits::kThreads>(floats(item & 1) + kTile, p.delta + row_base, first, p.seq_q, thread);
  };
  auto length_of = [&](int item) {
    return has_keys ? static_cast<int>(p.lists_transposed.lengths[work.list_index(item)]) : 0;
  };
  auto entries_of = [&](int item) { return p.lists_transposed.entries + work.list_index(item) * kTile; };
  auto walk = [&](int item, const uint32_t* list, int length) {
    const uint32_t q_address = shared_address(q_tile(item & 1));
    const uint32_t grad_out_address = q_address + Traits::kTileElements * int(sizeof(Element));
    const float* lse2 = floats(item & 1);
    walk_steps(list, length, lane, [&](const StepEntries& entries) {
      rows.step(p.scale_log2, q_address, grad_out_address, lse2, lse2 + kTile, entries, lane);
    });
  };
  stream_listed_tiles<kTile>(work.items, lists, lane, stage, length_of, entries_of, walk);
  rows.store(p, batch, kv_head, first_key, lane);
}

}  // namespace attnkit::cuda::sparse
