// The producer-warp pipeline of the scattered kernels that stream K and V (sm_90, width 64): the forward
// (scattered_forward_tma_kernel) and the dQ kernel of the backward (scattered_backward_dq_tma_kernel) walk their
// warps' lists as the cp.async forms do (scattered_forward_kernel.cuh, scattered_backward_dq_kernel.cuh), with K and V
// staged by TMA instead of by every thread.
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head), plus one producer warp. For each key tile t
// (two stages, s = t % 2) the producer waits until every walking warp has released stage s (mbarrier `empty`, one
// arrival per warp a tile), ORs the list lengths of the CTA's row groups for tile t, and either issues two TMA box
// loads (K and V, 256 keys x 64 columns each, 128-byte swizzled: the staged tile's layout) completing on `full[s]`,
// or, when no group attends the tile, arrives on full[s] without data. Each walking warp copies its own list of tile
// t + 1 (cp.async, its own group) while it walks tile t, waits for full[s] (every tile: the parity waits stay
// unambiguous), walks it when its list is not empty, and releases stage s. No CTA-wide barrier after the setup: a warp
// runs up to a stage ahead of the slowest, and the staging instructions leave the walking warps.
//
// Counts as the cp.async forms; shared memory: the same stages and list buffers, four mbarriers.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma_copy.cuh"
#include "cuda/sparse/scattered_backward_dq_kernel.cuh"
#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_forward_rows.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_tma_maps.hpp"

namespace attnkit::cuda::sparse {

template <class Element, int Warps>
struct ScatteredTmaTraits : ScatteredTileShape<kTmaTileColumns, Warps> {
  using Shape = ScatteredTileShape<kTmaTileColumns, Warps>;
  static_assert(Shape::kTile == kTmaTileKeys, "one TMA box a staged tile");
  static constexpr int kThreads = (Warps + 1) * 32;  // the walking warps and the producer
  static constexpr int kStageBytes = 2 * Shape::kTileElements * int(sizeof(Element));
  static constexpr int kListBytes = Warps * 2 * Shape::kListEntries * 4;
  static constexpr int kSharedBytes = 2 * kStageBytes + kListBytes + 4 * 8;
};

// The shared memory of the pipeline above: [stage][K, V][kTile][64] tiles, then the walking warps' list buffers, then
// the full and empty barriers.
template <class Element, int Warps>
struct ScatteredTmaStorage {
  using Traits = ScatteredTmaTraits<Element, Warps>;
  unsigned char* shared;

  __device__ __forceinline__ Element* tiles() const { return reinterpret_cast<Element*>(shared); }
  __device__ __forceinline__ uint32_t* lists(int warp) const {
    return reinterpret_cast<uint32_t*>(shared + 2 * Traits::kStageBytes) + warp * 2 * Traits::kListEntries;
  }
  __device__ __forceinline__ uint64_t* full() const {
    return reinterpret_cast<uint64_t*>(shared + 2 * Traits::kStageBytes + Traits::kListBytes);
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

// The producer warp's part of the pipeline for the CTA's (batch, head) and row groups first_group .. first_group +
// Warps - 1.
template <class Element, int Warps, class Base>
__device__ __forceinline__ void produce_key_value_tiles_tma(const ScatteredTmaParams<Base>& tp,
                                                            const ScatteredTmaStorage<Element, Warps>& storage,
                                                            int32_t batch, int32_t head, int32_t first_group,
                                                            int lane) {
  using Traits = ScatteredTmaTraits<Element, Warps>;
  constexpr int kTile = Traits::kTile;
  const Base& p = tp.base;
  const int tiles_k = (p.seq_k + kTile - 1) / kTile;
  uint64_t* full = storage.full();
  uint64_t* empty = storage.empty();
  const int32_t group = first_group + lane;
  const bool listed = lane < Warps && group < p.lists.groups;
  const int64_t first_list = listed ? p.lists.index(batch, head, group, 0) : 0;
  const int32_t kv_head = head / p.heads_per_kv;
  for (int t = 0; t < tiles_k; ++t) {
    const int s = t & 1;
    if (t >= 2) fmha_sm90::barrier_wait(&empty[s], ((t >> 1) - 1) & 1);
    const bool needed = __any_sync(kFullWarp, listed && p.lists.lengths[first_list + t] != 0u);
    if (lane != 0) continue;
    if (!needed) {
      fmha_sm90::barrier_arrive(&full[s]);
      continue;
    }
    fmha_sm90::barrier_arrive_expect_bytes(&full[s], Traits::kStageBytes);
    const int32_t c[5] = {0, kv_head, t * kTile, batch, 0};
    Element* stage = storage.tiles() + s * 2 * Traits::kTileElements;
    fmha_sm90::tma_load_box(&tp.k, stage, &full[s], tp.rank, c);
    fmha_sm90::tma_load_box(&tp.v, stage + Traits::kTileElements, &full[s], tp.rank, c);
  }
}

// A walking warp's part: step(k_address, v_address, entries) for every 16 entries of its list of each tile.
template <class Element, int Warps, class Base, class Step>
__device__ __forceinline__ void walk_key_value_tiles_tma(const Base& p,
                                                         const ScatteredTmaStorage<Element, Warps>& storage,
                                                         int32_t batch, int32_t head, int32_t group, int warp, int lane,
                                                         const Step& step) {
  using Traits = ScatteredTmaTraits<Element, Warps>;
  constexpr int kTile = Traits::kTile;
  const int tiles_k = (p.seq_k + kTile - 1) / kTile;
  uint32_t* lists = storage.lists(warp);
  uint64_t* full = storage.full();
  uint64_t* empty = storage.empty();
  const bool has_rows = group < p.lists.groups;
  const int64_t first_list = has_rows ? p.lists.index(batch, head, group, 0) : 0;
  auto length_of = [&](int t) {
    return has_rows && t < tiles_k ? static_cast<int>(p.lists.lengths[first_list + t]) : 0;
  };
  auto copy_list = [&](int t, int length) {
    copy_list_async(lists + (t & 1) * kTile, p.lists.entries + (first_list + t) * kTile, length, lane);
  };
  int current = length_of(0);
  int next = length_of(1);
  copy_list(0, current);
  commit_async_copies();
  for (int t = 0; t < tiles_k; ++t) {
    const int s = t & 1;
    copy_list(t + 1, next);  // into the buffer of tile t - 1, whose walk ended before this warp's last sync
    commit_async_copies();
    const int length = current;
    current = next;
    next = length_of(t + 2);
    wait_async_copies<1>();
    __syncwarp();
    // Every warp waits for every tile, needed or not: a warp that skipped a phase could take the next
    // phase of the same parity for complete (a parity wait sees the preceding phase as done).
    fmha_sm90::barrier_wait(&full[s], (t >> 1) & 1);
    if (length > 0) {
      const uint32_t k_address = shared_address(storage.tiles() + s * 2 * Traits::kTileElements);
      const uint32_t v_address = k_address + Traits::kTileElements * int(sizeof(Element));
      walk_steps(lists + (t & 1) * kTile, length, lane,
                 [&](const StepEntries& entries) { step(k_address, v_address, entries); });
    }
    __syncwarp();
    if (lane == 0) fmha_sm90::barrier_arrive(&empty[s]);
  }
}

// The kernel of the pipeline for rows of type Rows (ScatteredForwardRows or ScatteredGradQRows: load, step, store).
template <class Element, int Warps, class Rows, class Base>
__device__ __forceinline__ void scattered_tma_rows(const ScatteredTmaParams<Base>& tp, unsigned char* shared) {
  const ScatteredTmaStorage<Element, Warps> storage{shared};
  const Base& p = tp.base;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t first_group = static_cast<int32_t>(blockIdx.x) * Warps;
  storage.initialise();
  if (warp == Warps) {
    produce_key_value_tiles_tma<Element, Warps>(tp, storage, batch, head, first_group, lane);
    return;
  }
  const int32_t first_row = (first_group + warp) * 16;
  Rows rows;
  rows.load(p, batch, head, first_row, lane);
  walk_key_value_tiles_tma<Element, Warps>(p, storage, batch, head, first_group + warp, warp, lane,
                                           [&](uint32_t k_address, uint32_t v_address, const StepEntries& entries) {
                                             rows.step(p.scale_log2, k_address, v_address, entries, lane);
                                           });
  rows.store(p, batch, head, first_row, lane);
}

template <class Element, int Warps>
__global__ void __launch_bounds__((Warps + 1) * 32, 1)
    scattered_forward_tma_kernel(const __grid_constant__ ScatteredTmaForwardParams tp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char tma_shared[];  // TMA's 128-byte swizzle repeats every 1024 bytes
  scattered_tma_rows<Element, Warps, ScatteredForwardRows<Element, kTmaTileColumns>>(tp, tma_shared);
#endif  // sm_90 (the launcher runs this kernel only where its sm_90 code was built)
}

template <class Element, int Warps>
__global__ void __launch_bounds__((Warps + 1) * 32, 1)
    scattered_backward_dq_tma_kernel(const __grid_constant__ ScatteredTmaGradQParams tp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(1024) unsigned char tma_shared[];  // TMA's 128-byte swizzle repeats every 1024 bytes
  scattered_tma_rows<Element, Warps, ScatteredGradQRows<Element, kTmaTileColumns>>(tp, tma_shared);
#endif  // sm_90 (the launcher runs this kernel only where its sm_90 code was built)
}

}  // namespace attnkit::cuda::sparse
