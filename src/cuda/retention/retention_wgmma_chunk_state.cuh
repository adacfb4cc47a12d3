// The state warpgroups of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh): the fp32 state
// slice S [D, E] in wgmma accumulators, state warpgroup w holding rows [kStateRows w, kStateRows (w + 1))
// (kStateRows / 64 m64nE tiles, E / 2 values a thread each), read once (the initial state, and with segments the
// states of the segments before this one) and written once (the final state, or the segment's own state in the
// state-only launch).
//
// Per chunk of L tokens: V~ = diag(gamma^(L-1-j)) V in a scaled-V tile (retention_wgmma_chunk_scaled_values.cuh: at
// D = 64 written by the chunk's output warpgroup, values_scaled, and released after the update, values_free; else, and
// in the state-only launch, scaled here by the state warpgroups' threads with fp32 factors held for whole chunks where
// the registers allow), S <- gamma^L S, then S += K^T V~ as kStateRows / 64 m64nEk16 x 4 wgmmas per warpgroup with its
// rows of K^T read MN-major from the K tile; the stage is released, and once the output warpgroup of chunk c + 1 has
// read its state tile with its previous chunk's Q S (state_free) each warpgroup writes its rows of the new S into that
// tile as 16 bits with stmatrix (state_ready, which counts every state thread). The update of chunk c thus runs beside
// the output warpgroups' P V and stores of chunk c and Q K^T of chunk c + 1 (with two output warpgroups, beside the
// whole of chunk c - 1's output).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/named_barrier.cuh"
#include "cuda/common/programmatic_launch.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_scaled_values.cuh"
#include "cuda/retention/retention_wgmma_chunk_walk.cuh"

namespace attnkit::cuda::retention {

template <class Traits>
__device__ __forceinline__ void wgmma_chunk_state(const ChunkParams& p, const WgmmaChunkWalk& w,
                                                  typename Traits::SharedStorage& ss, int state_warpgroup, int wg_tid) {
  using namespace cute;
  using Element = typename Traits::Element;
  using fmha_sm90::barrier_arrive;
  using fmha_sm90::barrier_wait;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kValueBlock = Traits::kValueBlock;
  constexpr int kStateRows = Traits::kStateRows;
  constexpr int kStateThreads = Traits::kStateWarpgroups * Traits::kWarpgroupThreads;
  constexpr int kStateBarrier = 1;  // named barrier among the state warpgroups' threads
  typename Traits::MmaStateUpdate mma;
  auto thread_mma = mma.get_thread_slice(wg_tid);
  Tensor acc = partition_fragment_C(mma, Shape<Int<kStateRows>, Int<kValueBlock>>{});  // (MMA, kStateRows / 64, 1)
  constexpr int kTileValues = kValueBlock / 2;  // values of one m64nE tile a thread holds
  static_assert(decltype(size(acc))::value == kTileValues * (kStateRows / 64), "kStateRows / 64 m64nE tiles");

  const int lane = wg_tid % 32;
  const int row0 = state_warpgroup * kStateRows;  // this warpgroup's first state row
  const int row_lo = 16 * (wg_tid / 32) + lane / 4;
  const int col0 = 2 * (lane % 4);
  // State row and column of value pair `pair` (values 2 pair, 2 pair + 1: columns col, col + 1) of acc.
  auto row_of = [&](int pair) { return row0 + (pair / (kTileValues / 2)) * 64 + row_lo + 8 * (pair & 1); };
  auto col_of = [&](int pair) { return 8 * ((pair % (kTileValues / 2)) >> 1) + col0; };
  constexpr int kPairs = decltype(size(acc))::value / 2;

  const float log2_gamma = w.log2_gamma;
  const float gamma = exp2f(log2_gamma);
  // This CTA's block of part j's own state in segment_states (the state-only launch's parts, state_splits a segment).
  const int64_t parts = static_cast<int64_t>(p.segments - 1) * p.state_splits;
  auto segment_state = [&](int64_t j) {
    return p.segment_states + (((w.b * p.heads + w.h) * parts + j) * kHeadDim) * p.value_columns +
           static_cast<int64_t>(w.slice) * kValueBlock;
  };

  if (w.state_only) {
    clear(acc);
  } else {
    const float factor = p.gradient_state_factors ? 1.0f / (w.scale * gamma) : 1.0f;
    const StateOperand& s0 = p.initial_state;
    const float* s0_base = s0.data == nullptr ? nullptr
                                              : s0.data + w.b * s0.batch + w.h * s0.head +
                                                    static_cast<int64_t>(w.slice) * kValueBlock * s0.col;
    CUTE_UNROLL
    for (int pair = 0; pair < kPairs; ++pair) {
      const int row = row_of(pair);
      const int col = col_of(pair);
      float2 values = make_float2(0.0f, 0.0f);
      if (s0_base != nullptr && s0.pairs) {
        values = *reinterpret_cast<const float2*>(s0_base + row * s0.row + col);
      } else if (s0_base != nullptr) {
        values = make_float2(s0_base[row * s0.row + col * s0.col], s0_base[row * s0.row + (col + 1) * s0.col]);
      }
      acc(2 * pair) = factor * values.x;
      acc(2 * pair + 1) = factor * values.y;
    }
    // The earlier segments' parts' own states, oldest first: S <- gamma^part_tokens S + S_j. They are the
    // state-only launch's, which this launch follows as a programmatic dependent on 9.0: wait for it here.
    if (w.segment > 0) wait_for_preceding_grid();
#pragma unroll 1
    for (int64_t j = 0; j < static_cast<int64_t>(w.segment) * p.state_splits; ++j) {
      const TokenRange part = state_part_tokens(p, j);
      const float segment_decay = decay_power(log2_gamma, static_cast<float>(part.end - part.begin));
      const float* own = segment_state(j);
      CUTE_UNROLL
      for (int pair = 0; pair < kPairs; ++pair) {
        const float2 values =
            *reinterpret_cast<const float2*>(own + static_cast<int64_t>(row_of(pair)) * p.value_columns + col_of(pair));
        acc(2 * pair) = segment_decay * acc(2 * pair) + values.x;
        acc(2 * pair + 1) = segment_decay * acc(2 * pair + 1) + values.y;
      }
    }
  }
  // This warpgroup's rows of the state as 16 bits into the state tile (whose readers have finished), announced on
  // state_ready. The tile is E / 64 blocks of D rows of 128 bytes (column block c at c x D x 128 bytes); the rows go
  // with stmatrix (store_accumulator_rows), m64 tile t at row row0 + 64 t.
  // The state before chunk m goes to the tile of output warpgroup m % kOutputWarpgroups, once that warpgroup's Q S of
  // chunk m - kOutputWarpgroups has read it (state_free, its (m / kOutputWarpgroups - 1)-th phase).
  constexpr int kOutputs = Traits::kOutputWarpgroups;
  constexpr uint32_t kStateTileBytes = cute::cosize_v<typename Traits::LayoutState> * sizeof(Element);
  const uint32_t state_tiles = shared_address(ss.state[0]);
  auto publish_state = [&](int64_t m) {
    const int tile = static_cast<int>(m % kOutputs);
    if (m >= kOutputs) barrier_wait(&ss.state_free[tile], static_cast<uint32_t>((m / kOutputs - 1) & 1));
    CUTE_UNROLL
    for (int t = 0; t < kStateRows / 64; ++t) {
      store_accumulator_rows<Element, kValueBlock>(
          acc, t * (kTileValues / 2),
          state_tiles + tile * kStateTileBytes + static_cast<uint32_t>((row0 + 64 * t) * 128), kHeadDim * 128, wg_tid);
    }
    fmha_sm90::fence_generic_to_async_shared();
    barrier_arrive(&ss.state_ready[tile]);
  };
  if (!w.state_only && w.chunks > 0) publish_state(0);

  // V~ of each chunk: scaled here into tile 0 where the state warpgroups scale it (the state-only launch, and
  // instances with one output warpgroup), else by the chunk's output warpgroup into its tile (values_scaled).
  const bool outputs_scale = Traits::kOutputsScaleValues && !w.state_only;
  // Factors held where one CTA has the multiprocessor's registers (at D = 128, E = 64 the state warpgroup's 104 would
  // spill).
  const ValueScaling<Traits, kStateThreads, Traits::kMinBlocksPerSm == 1> scaling(
      state_warpgroup * Traits::kWarpgroupThreads + wg_tid, log2_gamma);

  int stage = 0;
  uint32_t phase = 0;  // (chunk / kStages) % 2
#pragma unroll 1
  for (int64_t chunk = 0; chunk < w.chunks; ++chunk) {
    const int length = w.chunk_length(chunk);
    barrier_wait(&ss.full[stage], phase);
    fmha_sm90::fence_generic_to_async_shared();  // the copies, for this thread's wgmma reads
    const int values_tile = outputs_scale ? static_cast<int>(chunk % kOutputs) : 0;
    if (outputs_scale) {
      barrier_wait(&ss.values_scaled[values_tile], static_cast<uint32_t>((chunk / kOutputs) & 1));
    } else {
      uint4 scaled[decltype(scaling)::kPieces];
      scaling.load(ss, stage, length, scaled);
      // The previous chunk's updates have read the scaled tile (every state warp waited for its wgmmas).
      named_barrier_sync(kStateBarrier, kStateThreads);
      scaling.store(ss, 0, scaled);
      fmha_sm90::fence_generic_to_async_shared();
      named_barrier_sync(kStateBarrier, kStateThreads);
    }

    const float chunk_decay = decay_power(log2_gamma, static_cast<float>(length));
    CUTE_UNROLL
    for (int i = 0; i < size(acc); ++i) acc(i) *= chunk_decay;
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    // The operand descriptors, built here from opaque addresses (hoisted, each k-step's would hold registers).
    Tensor sKt = make_tensor(make_smem_ptr(opaque(ss.k + stage * Traits::kQkStageElements + row0 * Traits::kChunk)),
                             typename Traits::LayoutKtRows{});  // (d - row0, token)
    Tensor sVs =
        make_tensor(make_smem_ptr(opaque(ss.v_scaled[values_tile])), typename Traits::LayoutVScaled{});  // (e, token)
    Tensor tArK = thread_mma.partition_fragment_A(sKt);  // (MMA, kStateRows / 64, tokens / 16)
    Tensor tBrV = thread_mma.partition_fragment_B(sVs);  // (MMA, 1, tokens / 16)
    fmha_sm90::issue_gemm<true>(mma, tArK, tBrV, acc);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
    if (outputs_scale) barrier_arrive(&ss.values_free[values_tile]);
    barrier_arrive(&ss.empty[stage]);
    if (++stage == Traits::kStages) {
      stage = 0;
      phase ^= 1u;
    }
    if (!w.state_only && chunk + 1 < w.chunks) publish_state(chunk + 1);
  }

  if (w.state_only) {
    float* own = segment_state(w.segment);
    CUTE_UNROLL
    for (int pair = 0; pair < kPairs; ++pair) {
      *reinterpret_cast<float2*>(own + static_cast<int64_t>(row_of(pair)) * p.value_columns + col_of(pair)) =
          make_float2(acc(2 * pair), acc(2 * pair + 1));
    }
  } else if (p.final_state.data != nullptr && w.segment == p.segments - 1) {
    const float factor = p.gradient_state_factors ? w.scale * gamma : 1.0f;
    const StateOperand& s1 = p.final_state;
    float* s1_base = s1.data + w.b * s1.batch + w.h * s1.head + static_cast<int64_t>(w.slice) * kValueBlock * s1.col;
    CUTE_UNROLL
    for (int pair = 0; pair < kPairs; ++pair) {
      const int row = row_of(pair);
      const int col = col_of(pair);
      const float2 values = make_float2(factor * acc(2 * pair), factor * acc(2 * pair + 1));
      if (s1.pairs) {
        *reinterpret_cast<float2*>(s1_base + row * s1.row + col) = values;
      } else {
        s1_base[row * s1.row + col * s1.col] = values.x;
        s1_base[row * s1.row + (col + 1) * s1.col] = values.y;
      }
    }
  }
}

}  // namespace attnkit::cuda::retention
