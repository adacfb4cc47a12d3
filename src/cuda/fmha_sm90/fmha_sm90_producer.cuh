// The producer warpgroup of the Hopper forward kernel: gathers the Q tile once (issued before the CTA's
// setup, see issue_q) and then, for every KV tile the mask policy lists, the K and V tiles into their
// stage buffers — as TMA boxes issued by one thread when the tensors allow it (fmha_sm90_tma.hpp: box
// mode, dilation up to 8, strides TMA can express), else gathered row by row with cp.async by the whole
// warpgroup:
//
// Tiles are boxes of tokens (fmha_tokens.cuh), so each row is gathered from its own address: per tile
// every producer thread computes the start of one K row and one V row (dilation, strides and box shape
// included) into a shared table, and then all 128 threads copy 16-byte chunks of consecutive rows
// (coalesced) into the 128-byte swizzled layouts the wgmma reads. Rows outside the extents and columns
// past D (Dv for V) are zero-filled. Hand-off: a stage's K buffer is refilled after the consumers
// release it (k_empty) and announced with k_full once every producer thread's copies have landed and
// been fenced for the async proxy; V likewise. Copies of V(i) stay in flight while the producer waits
// for K(i), and K(i+1) while it waits for V(i), so one tile's latency is always hidden.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tile_walk.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma_copy.cuh"

namespace attnkit::cuda::fmha_sm90 {

// Copies a Rows x kHeadDim tile whose row r starts at row_start(r) (nullptr: zero row) into shared
// memory, element (row, column) at destination(row, column), zero-filling columns >= valid_cols.
// Destinations come from the swizzled CuTe tensors: the GMMA layouts swizzle address bits, so only a
// tensor built on the shared pointer (not the bare layout function) yields the address.
template <class Traits, int Rows, class Destination, class RowStart>
__device__ __forceinline__ void copy_tile_async(const Destination& destination, const void* fallback,
                                                const RowStart& row_start, int valid_cols, int ptid) {
  using Element = typename Traits::Element;
  constexpr int kRowsPerPass = Traits::kProducerThreads / Traits::kChunksPerRow;
  static_assert(Rows % kRowsPerPass == 0, "passes must cover whole tiles");
  const int col = (ptid % Traits::kChunksPerRow) * Traits::kElementsPerChunk;
  const bool col_valid = col < valid_cols;
#pragma unroll
  for (int pass = 0; pass < Rows / kRowsPerPass; ++pass) {
    const int row = ptid / Traits::kChunksPerRow + pass * kRowsPerPass;
    const Element* start = row_start(row);
    const bool valid = start != nullptr && col_valid;
    copy_16_bytes_async(shared_address(destination(row, col)), valid ? static_cast<const void*>(start + col) : fallback,
                        valid);
  }
}

template <class Traits, class Policy>
struct Sm90Producer {
  using Element = typename Traits::Element;
  using Storage = typename Traits::SharedStorage;
  static constexpr int kBlockN = Traits::kBlockN;

  // K and V of KV tile i (at `origin`) into stage i % Stages as TMA boxes, one thread, announcing each
  // buffer's bytes; waits for the consumers' release of the stage's previous tile first.
  __device__ __forceinline__ static void load_tile_with_tma(const fmha::FmhaParams& p, const fmha::CtaTile& cta,
                                                            const fmha::TileOrigin& origin, Storage& ss,
                                                            const Sm90TileMaps& maps, int i) {
    using namespace cute;
    Tensor sK = make_tensor(make_smem_ptr(ss.k), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(ss.v), typename Traits::SmemLayoutVt{});
    const int stage = i % Traits::kStages;
    const uint32_t empty_parity = ((i / Traits::kStages) + 1) & 1;
    int32_t c[5];
    tile_coordinates(maps, p, origin, cta.head / p.heads_per_kv, cta.batch, c);
    if (i >= Traits::kStages) barrier_wait(&ss.k_empty[stage], empty_parity);
    barrier_arrive_expect_bytes(&ss.k_full[stage], Traits::kTileBytes);
#pragma unroll
    for (int chunk = 0; chunk < Traits::kHeadDim / Traits::kChunkColumns; ++chunk) {
      c[0] = chunk * Traits::kChunkColumns;
      tma_load_box(&maps.k, raw_pointer_cast(&sK(0, c[0], stage)), &ss.k_full[stage], maps.rank, c);
    }
    if (i >= Traits::kStages) barrier_wait(&ss.v_empty[stage], empty_parity);
    barrier_arrive_expect_bytes(&ss.v_full[stage], Traits::kTileBytes);
#pragma unroll
    for (int chunk = 0; chunk < Traits::kHeadDim / Traits::kChunkColumns; ++chunk) {
      c[0] = chunk * Traits::kChunkColumns;
      tma_load_box(&maps.v, raw_pointer_cast(&sVt(c[0], 0, stage)), &ss.v_full[stage], maps.rank, c);
    }
  }

  // The first KV tile by TMA (maps.enabled, thread 0), issued before the CTA's setup barrier from the
  // policy's registers so that its latency overlaps the setup; load_with_tma goes on from tile 1.
  __device__ __forceinline__ static void issue_first_kv(const fmha::FmhaParams& p, const fmha::CtaTile& cta,
                                                        const Policy& policy, Storage& ss, const Sm90TileMaps& maps) {
    if (policy.count() > 0) load_tile_with_tma(p, cta, policy.first_origin(), ss, maps, 0);
  }

  // One thread issues K and V tiles 1.. as TMA boxes (tile 0 went out in issue_first_kv), then, for each
  // further head of the CTA, its tile 0 and its tiles 1..; after a head's tiles, the next head's Q tile into
  // its buffer (head n uses buffer n % kQBuffers) once the consumers have released that buffer (q_empty, after
  // the epilogue of head n - kQBuffers). The KV tiles of all heads share one run of stage/phase counters.
  __device__ __forceinline__ void load_with_tma(const fmha::FmhaParams& p, const fmha::CtaTile& cta, int heads,
                                                const Policy& policy, Storage& ss, const Sm90TileMaps& maps) const {
    constexpr int kQBuffers = Traits::kQBuffers;
    const int count = policy.count();
    for (int j = 0; j < heads; ++j) {
      fmha::CtaTile head_cta = cta;
      head_cta.head += j;
      TileWalk<Policy> walk(policy);
      if (j > 0 && count > 0) load_tile_with_tma(p, head_cta, policy.origin(walk.tile), ss, maps, j * count);
      for (int i = 1; i < count; ++i) {
        walk.advance(policy, i - 1);
        load_tile_with_tma(p, head_cta, policy.origin(walk.tile), ss, maps, j * count + i);
      }
      const int next = j + 1;
      if (next < heads) {
        if (next >= kQBuffers) barrier_wait(&ss.q_empty[next % kQBuffers], ((next - kQBuffers) / kQBuffers) & 1);
        fmha::CtaTile next_cta = cta;
        next_cta.head += next;
        issue_q(p, next_cta, ss, maps, 0, next % kQBuffers);
      }
    }
  }

  // Issues the Q tile into Q buffer `buffer`: one TMA box per column chunk from thread 0 when maps.q_enabled
  // (with K/V by TMA: q_full[buffer] then expects one arrival and the bytes), else the producer's first
  // cp.async group (buffer 0), which operator() waits for before announcing q_full. The first head's is issued
  // before the CTA's setup so that the load overlaps it; the barriers must be initialised (and fenced) before.
  __device__ __forceinline__ static void issue_q(const fmha::FmhaParams& p, const fmha::CtaTile& cta, Storage& ss,
                                                 const Sm90TileMaps& maps, int ptid, int buffer) {
    using namespace cute;
    if (maps.q_enabled) {
      if (ptid != 0) return;
      Tensor sQ = make_tensor(make_smem_ptr(ss.q[buffer]), typename Traits::SmemLayoutQ{});
      int32_t c[5];
      box_coordinates(p.dims, p.dilation, p.q_space.extent[0], maps.q_fold_batch != 0, maps.q_has_batch != 0, cta.q,
                      cta.head, cta.batch, c);
      barrier_arrive_expect_bytes(&ss.q_full[buffer], Traits::kQTileBytes);
#pragma unroll
      for (int chunk = 0; chunk < Traits::kHeadDim / Traits::kChunkColumns; ++chunk) {
        c[0] = chunk * Traits::kChunkColumns;
        tma_load_box(&maps.q, raw_pointer_cast(&sQ(0, c[0])), &ss.q_full[buffer], maps.q_rank, c);
      }
      return;
    }
    const int64_t q_offset = cta.batch * p.q.batch_stride + cta.head * p.q.head_stride;
    Tensor sQ = make_tensor(make_smem_ptr(ss.q[0]), typename Traits::SmemLayoutQ{});
    copy_tile_async<Traits, Traits::kBlockM>(
        [&](int row, int col) { return raw_pointer_cast(&sQ(row, col)); }, p.q.data,
        [&](int row) { return fmha::tile_row_start<Element>(p.q, q_offset, p.q_space, p.dilation, cta.q, row); },
        p.head_dim, ptid);
    commit_async_copies();
  }

  // Runs after issue_q(). `heads` > 1 only on the TMA path (choose_heads_per_cta).
  __device__ __forceinline__ void operator()(const fmha::FmhaParams& p, const fmha::CtaTile& cta, int heads,
                                             const Policy& policy, Storage& ss, const Sm90TileMaps& maps,
                                             int ptid) const {
    using namespace cute;
    const int64_t head_kv = cta.head / p.heads_per_kv;
    if (maps.enabled) {
      if (!maps.q_enabled) {
        wait_async_copies<0>();
        fence_generic_to_async_shared();
        barrier_arrive(&ss.q_full[0]);
      }
      if (ptid == 0) load_with_tma(p, cta, heads, policy, ss, maps);
      return;
    }
    const int64_t k_offset = cta.batch * p.k.batch_stride + head_kv * p.k.head_stride;
    const int64_t v_offset = cta.batch * p.v.batch_stride + head_kv * p.v.head_stride;
    Tensor sK = make_tensor(make_smem_ptr(ss.k), typename Traits::SmemLayoutK{});    // (key, head dim, stage)
    Tensor sVt = make_tensor(make_smem_ptr(ss.v), typename Traits::SmemLayoutVt{});  // (head dim, key, stage)

    const int count = policy.count();
    TileWalk<Policy> walk(policy);
    for (int i = 0; i < count; ++i) {
      const int stage = i % Traits::kStages;
      const uint32_t empty_parity = ((i / Traits::kStages) + 1) & 1;
      const fmha::TileOrigin origin = policy.origin(walk.tile);
      for (int r = ptid; r < 2 * kBlockN; r += Traits::kProducerThreads) {
        const bool is_v = r >= kBlockN;
        const int row = is_v ? r - kBlockN : r;
        ss.rows[stage][is_v ? 1 : 0][row] = fmha::tile_row_start<Element>(is_v ? p.v : p.k, is_v ? v_offset : k_offset,
                                                                          p.kv_space, p.dilation, origin, row);
      }
      named_barrier_sync(1, Traits::kProducerThreads);  // the row table of this stage is complete

      if (i >= Traits::kStages) barrier_wait(&ss.k_empty[stage], empty_parity);
      copy_tile_async<Traits, kBlockN>([&](int row, int col) { return raw_pointer_cast(&sK(row, col, stage)); },
                                       p.k.data, [&](int row) { return ss.rows[stage][0][row]; }, p.head_dim, ptid);
      commit_async_copies();
      // Everything before K(i) has landed: Q (first tile) or V(i - 1).
      wait_async_copies<1>();
      fence_generic_to_async_shared();
      barrier_arrive(i == 0 ? &ss.q_full[0] : &ss.v_full[(i + Traits::kStages - 1) % Traits::kStages]);

      if (i >= Traits::kStages) barrier_wait(&ss.v_empty[stage], empty_parity);
      copy_tile_async<Traits, kBlockN>([&](int row, int col) { return raw_pointer_cast(&sVt(col, row, stage)); },
                                       p.v.data, [&](int row) { return ss.rows[stage][1][row]; }, p.head_dim_v, ptid);
      commit_async_copies();
      wait_async_copies<1>();  // K(i) has landed
      fence_generic_to_async_shared();
      barrier_arrive(&ss.k_full[stage]);

      walk.advance(policy, i);
    }
    wait_async_copies<0>();
    fence_generic_to_async_shared();
    barrier_arrive(count == 0 ? &ss.q_full[0] : &ss.v_full[(count - 1) % Traits::kStages]);
  }
};

}  // namespace attnkit::cuda::fmha_sm90
