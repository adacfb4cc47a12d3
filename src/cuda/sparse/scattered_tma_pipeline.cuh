// The producer-warp pipeline of the scattered kernels (sm_90, width 64): the forward and the dQ kernel
// (scattered_tma_rows_kernel) stream K and V tiles, the dK/dV kernel
// (scattered_backward_dkdv_tma_kernel) Q and dO tiles with their lse2 and delta rows; each walks its warps' lists as
// its cp.async form does (scattered_forward_kernel.cuh, scattered_backward_dq_kernel.cuh,
// scattered_backward_dkdv_kernel.cuh), with the tiles staged by TMA instead of by every thread.
//
// Algorithm. A CTA owns Warps row groups of 16 (query rows, or keys in the dK/dV kernel), plus one producer warp.
// For each work item t (a tile of the other side; two stages, s = t % 2) the producer waits until every walking warp
// has released stage s (mbarrier `empty`, one arrival per warp an item), ORs the list lengths of the CTA's groups for
// item t, and either issues the item's TMA box loads (256 rows x 64 columns, 128-byte swizzled: the staged tile's
// layout; the dK/dV kernel's two rows of 256 floats too) completing on `full[s]`, or, when no group attends the item,
// arrives on full[s] without data. Each walking warp copies its own list of item t + 1 (cp.async, its own group)
// while it walks item t, waits for full[s] (every item: the parity waits stay unambiguous), walks it when its list is
// not empty, and releases stage s. No CTA-wide barrier after the setup: a warp runs up to a stage ahead of the
// slowest, and the staging instructions leave the walking warps.
//
// Counts as the cp.async forms; shared memory: the same stages and list buffers, four mbarriers.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma_copy.cuh"
#include "cuda/sparse/scattered_backward_dkdv_kernel.cuh"
#include "cuda/sparse/scattered_backward_dq_kernel.cuh"
#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_forward_rows.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_tma_maps.hpp"

namespace attnkit::cuda::sparse {

// The shared memory of the pipeline: two stages of StageBytes, the walking warps' list buffers ([2][Tile] entries a
// warp), the full and empty barriers.
template <int StageBytes, int Tile, int Warps>
struct ScatteredTmaStorage {
  static constexpr int kStageBytes = StageBytes;
  static constexpr int kListBytes = Warps * 2 * Tile * 4;
  static constexpr int kSharedBytes = 2 * StageBytes + kListBytes + 4 * 8;
  static_assert(StageBytes % 1024 == 0, "stages at TMA's 1024-byte swizzle period");
  unsigned char* shared;

  __device__ __forceinline__ unsigned char* stage(int s) const { return shared + s * StageBytes; }
  __device__ __forceinline__ uint32_t* lists(int warp) const {
    return reinterpret_cast<uint32_t*>(shared + 2 * StageBytes) + warp * 2 * Tile;
  }
  __device__ __forceinline__ uint64_t* full() const {
    return reinterpret_cast<uint64_t*>(shared + 2 * StageBytes + kListBytes);
  }
  __device__ __forceinline__ uint64_t* empty() const { return full() + 2; }

  // Every thread of the CTA: the barriers initialised and fenced, then a CTA-wide barrier.
  __device__ __forceinline__ void initialise() const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < 2; ++s) {
        fmha_sm90::barrier_init(&full()[s], 1);
        fmha_sm90::barrier_init(&empty()[s], Warps);
      }
      fmha_sm90::barrier_init_fence();
    }
    __syncthreads();
  }
};

// The K / V stages of the forward and dQ kernels.
template <class Element, int Warps>
struct ScatteredTmaTraits : ScatteredTileShape<kTmaTileColumns, Warps> {
  using Shape = ScatteredTileShape<kTmaTileColumns, Warps>;
  static_assert(Shape::kTile == kTmaTileKeys, "one TMA box a staged tile");
  static constexpr int kThreads = (Warps + 1) * 32;  // the walking warps and the producer
  static constexpr int kTileBytes = Shape::kTileElements * int(sizeof(Element));
  using Storage = ScatteredTmaStorage<2 * kTileBytes, Shape::kTile, Warps>;
  static constexpr int kSharedBytes = Storage::kSharedBytes;
};

// The Q / dO stages of the dK/dV kernel: the two tiles, then the tile's lse2 and delta (256 floats each).
template <class Element, int Warps>
struct ScatteredTmaKeyTraits : ScatteredTmaTraits<Element, Warps> {
  using Base = ScatteredTmaTraits<Element, Warps>;
  static constexpr int kFloatBytes = Base::kTile * 4;
  using Storage = ScatteredTmaStorage<2 * Base::kTileBytes + 2 * kFloatBytes, Base::kTile, Warps>;
  static constexpr int kSharedBytes = Storage::kSharedBytes;
};

// The producer warp's loop: for each of `items`, `needed(item)` whether the lane's row group lists it (lanes past the
// CTA's groups answer false) and, on lane 0 when some group does, issue(item, stage, full barrier) issues its TMA loads
// of Storage::kStageBytes in all.
template <class Storage, class Needed, class Issue>
__device__ __forceinline__ void produce_tiles_tma(const Storage& storage, int items, int lane, const Needed& needed,
                                                  const Issue& issue) {
  uint64_t* full = storage.full();
  uint64_t* empty = storage.empty();
  for (int t = 0; t < items; ++t) {
    const int s = t & 1;
    if (t >= 2) fmha_sm90::barrier_wait(&empty[s], ((t >> 1) - 1) & 1);
    const bool any = __any_sync(kFullWarp, needed(t));
    if (lane != 0) continue;
    if (!any) {
      fmha_sm90::barrier_arrive(&full[s]);
      continue;
    }
    fmha_sm90::barrier_arrive_expect_bytes(&full[s], Storage::kStageBytes);
    issue(t, storage.stage(s), &full[s]);
  }
}

// A walking warp's loop: length_of(item) (0 past the last item) and entries_of(item) name the warp's list of each
// item; walk(item, stage, list, length) runs on every item whose list is not empty.
template <int Tile, class Storage, class LengthOf, class EntriesOf, class Walk>
__device__ __forceinline__ void walk_tiles_tma(const Storage& storage, int items, int warp, int lane,
                                               const LengthOf& length_of, const EntriesOf& entries_of,
                                               const Walk& walk) {
  uint32_t* lists = storage.lists(warp);
  uint64_t* full = storage.full();
  uint64_t* empty = storage.empty();
  auto copy_list = [&](int t, int length) { copy_list_async(lists + (t & 1) * Tile, entries_of(t), length, lane); };
  int current = length_of(0);
  int next = length_of(1);
  copy_list(0, current);
  commit_async_copies();
  for (int t = 0; t < items; ++t) {
    const int s = t & 1;
    copy_list(t + 1, next);  // into the buffer of item t - 1, whose walk ended before this warp's last sync
    commit_async_copies();
    const int length = current;
    current = next;
    next = length_of(t + 2);
    wait_async_copies<1>();
    __syncwarp();
    // Every warp waits for every item, needed or not: a warp that skipped a phase could take the next
    // phase of the same parity for complete (a parity wait sees the preceding phase as done).
    fmha_sm90::barrier_wait(&full[s], (t >> 1) & 1);
    if (length > 0) walk(t, storage.stage(s), lists + (t & 1) * Tile, length);
    __syncwarp();
    if (lane == 0) fmha_sm90::barrier_arrive(&empty[s]);
  }
}

// The forward and dQ kernels: rows of type Rows (ScatteredForwardRows or ScatteredGradQRows: load, step, store) walk
// the K / V tiles of their KV head.
template <class Element, int Warps, class Rows, class Base>
__device__ __forceinline__ void scattered_tma_rows(const ScatteredTmaParams<Base>& tp, unsigned char* shared) {
  using Traits = ScatteredTmaTraits<Element, Warps>;
  constexpr int kTile = Traits::kTile;
  const typename Traits::Storage storage{shared};
  const Base& p = tp.base;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t first_group = static_cast<int32_t>(blockIdx.x) * Warps;
  const int tiles_k = (p.seq_k + kTile - 1) / kTile;
  storage.initialise();
  if (warp == Warps) {  // the producer
    const int32_t group = first_group + lane;
    const bool listed = lane < Warps && group < p.lists.groups;
    const int64_t first_list = listed ? p.lists.index(batch, head, group, 0) : 0;
    const int32_t kv_head = head / p.heads_per_kv;
    produce_tiles_tma(
        storage, tiles_k, lane, [&](int t) { return listed && p.lists.lengths[first_list + t] != 0u; },
        [&](int t, unsigned char* stage, uint64_t* full) {
          const int32_t c[5] = {0, kv_head, t * kTile, batch, 0};
          fmha_sm90::tma_load_box(&tp.k, stage, full, tp.rank, c);
          fmha_sm90::tma_load_box(&tp.v, stage + Traits::kTileBytes, full, tp.rank, c);
        });
    return;
  }
  const int32_t group = first_group + warp;
  const int32_t first_row = group * 16;
  Rows rows;
  rows.load(p, batch, head, first_row, lane);
  const bool has_rows = group < p.lists.groups;
  const int64_t first_list = has_rows ? p.lists.index(batch, head, group, 0) : 0;
  walk_tiles_tma<kTile>(
      storage, tiles_k, warp, lane,
      [&](int t) { return has_rows && t < tiles_k ? static_cast<int>(p.lists.lengths[first_list + t]) : 0; },
      [&](int t) { return p.lists.entries + (first_list + t) * kTile; },
      [&](int, unsigned char* stage, const uint32_t* list, int length) {
        const uint32_t k_address = shared_address(stage);
        const uint32_t v_address = k_address + Traits::kTileBytes;
        walk_steps(list, length, lane,
                   [&](const StepEntries& entries) { rows.step(p.scale_log2, k_address, v_address, entries, lane); });
      });
  rows.store(p, batch, head, first_row, lane);
}

// The forward (Rows ScatteredForwardRows, Base ScatteredForwardParams) and the dQ kernel (ScatteredGradQRows,
// ScatteredBackwardParams).
template <class Element, int Warps, class Rows, class Base>
__global__ void __launch_bounds__((Warps + 1) * 32, 1)
    scattered_tma_rows_kernel(const __grid_constant__ ScatteredTmaParams<Base> tp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char tma_shared[];  // TMA's 128-byte swizzle repeats every 1024 bytes
  scattered_tma_rows<Element, Warps, Rows>(tp, tma_shared);
#endif  // sm_90 (the launcher runs this kernel only where its sm_90 code was built)
}

// The dK/dV kernel: Warps groups of 16 keys of one (batch, KV head) walk the Q / dO tiles of every query head of the
// group (ScatteredKeyItems).
template <class Element, int Warps>
__global__ void __launch_bounds__((Warps + 1) * 32, 1)
    scattered_backward_dkdv_tma_kernel(const __grid_constant__ ScatteredTmaKeyParams tp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char tma_shared[];  // TMA's 128-byte swizzle repeats every 1024 bytes
  using Traits = ScatteredTmaKeyTraits<Element, Warps>;
  constexpr int kTile = Traits::kTile;
  const typename Traits::Storage storage{tma_shared};
  const ScatteredBackwardParams& p = tp.base;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int32_t first_group = static_cast<int32_t>(blockIdx.x) * Warps;
  storage.initialise();
  if (warp == Warps) {  // the producer
    const int32_t group = first_group + lane;
    const bool listed = lane < Warps && group < p.lists_transposed.groups;
    const ScatteredKeyItems work(p, kTile, batch, kv_head, group, listed);
    produce_tiles_tma(
        storage, work.items, lane,
        [&](int t) { return listed && p.lists_transposed.lengths[work.list_index(t)] != 0u; },
        [&](int t, unsigned char* stage, uint64_t* full) {
          const int head_in_group = work.head_of(t);
          const int32_t head = kv_head * p.heads_per_kv + head_in_group;
          const int32_t first = work.tile_of(t, head_in_group) * kTile;
          const int32_t c[5] = {0, head, first, batch, 0};
          fmha_sm90::tma_load_box(&tp.q, stage, full, tp.rank, c);
          fmha_sm90::tma_load_box(&tp.grad_out, stage + Traits::kTileBytes, full, tp.rank, c);
          const int32_t r[5] = {first, head, batch, 0, 0};
          fmha_sm90::tma_load_box(&tp.lse_log2, stage + 2 * Traits::kTileBytes, full, 3, r);
          fmha_sm90::tma_load_box(&tp.delta, stage + 2 * Traits::kTileBytes + Traits::kFloatBytes, full, 3, r);
        });
    return;
  }
  const int32_t group = first_group + warp;
  const int32_t first_key = group * 16;
  const bool has_keys = group < p.lists_transposed.groups;
  ScatteredKeyRows<Element, kTmaTileColumns> rows;
  rows.load(p, batch, kv_head, first_key, lane);
  const ScatteredKeyItems work(p, kTile, batch, kv_head, group, has_keys);
  walk_tiles_tma<kTile>(
      storage, work.items, warp, lane,
      [&](int t) {
        return has_keys && t < work.items ? static_cast<int>(p.lists_transposed.lengths[work.list_index(t)]) : 0;
      },
      [&](int t) { return p.lists_transposed.entries + work.list_index(t) * kTile; },
      [&](int, unsigned char* stage, const uint32_t* list, int length) {
        const uint32_t q_address = shared_address(stage);
        const uint32_t grad_out_address = q_address + Traits::kTileBytes;
        const float* lse2 = reinterpret_cast<const float*>(stage + 2 * Traits::kTileBytes);
        walk_steps(list, length, lane, [&](const StepEntries& entries) {
          rows.step(p.scale_log2, q_address, grad_out_address, lse2, lse2 + kTile, entries, lane);
        });
      });
  rows.store(p, batch, kv_head, first_key, lane);
#endif  // sm_90 (the launcher runs this kernel only where its sm_90 code was built)
}

}  // namespace attnkit::cuda::sparse
