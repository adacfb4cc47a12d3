// The output warpgroups of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh): the 64 rows of
// each chunk, O = diag(scale * gamma^(i+1)) Q S + P V with P_ij = scale * gamma^(i-j) (Q K^T)_ij for j <= i. With
// Traits::kOutputWarpgroups = 2 (D = 64) warpgroup o takes chunks o, o + 2, ..., with its own state tile, output-rows
// tile, state_ready / state_free barriers and named barrier; otherwise one warpgroup takes every chunk.
//
// Per chunk: issue Q K^T (m64n64, both operands in shared memory) as one wgmma batch; at D = 64 scale the chunk's V
// for the state update into this warpgroup's scaled-V tile (retention_wgmma_chunk_scaled_values.cuh) once the update
// of its previous chunk has read the tile (values_free), and announce it (values_scaled); wait for the state tile
// (state_ready: the state warpgroup has written the state before this chunk), issue Q S (m64nE, the 16-bit state
// tile MN-major) as a second batch; once Q K^T completes, mask and scale the scores and pack them to 16 bits in the
// A-operand registers of P V while Q S still runs; once Q S completes, release the state tile (state_free), scale
// its rows by scale * gamma^(i+1) and issue P V (register A, V MN-major) into the same accumulators; then release
// the stage. With 16-byte global access the finished rows go as 16 bits into the output-rows tile (128-byte swizzled
// rows: a warp's 4-byte stores hit 32 banks) and, once the next chunk's Q K^T is issued, from there to global memory
// in 16-byte pieces, 8 threads a 128-byte row: a quarter of the store instructions, and each row one L2 request
// instead of eight 16-byte pieces. Without it the accumulators are stored element-wise at the same point. Either way
// the stores come after the next chunk's wait and proxy fence (a fence orders the thread's earlier stores, so it
// would wait for stores issued just before it). The mask
// is branch-free (masked_decayed_score), so a thread's 32 exponentials pipeline; where the traits hold it
// (kHoldDecay: D = 64, one CTA a multiprocessor) its 32 values are computed once and the scores multiplied by them. A
// thread's accumulator value v of an m64nN tile is row 16 warp + lane / 4 + 8 ((v / 2) % 2), column 8 (v / 4) + 2 (lane
// % 4) + v % 2 (the wgmma D fragment).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/named_barrier.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_decay.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_scaled_values.cuh"
#include "cuda/retention/retention_wgmma_chunk_walk.cuh"

namespace attnkit::cuda::retention {

template <class Traits>
__device__ __forceinline__ void wgmma_chunk_outputs(const ChunkParams& p, const WgmmaChunkWalk& w,
                                                    typename Traits::SharedStorage& ss, int output, int wg_tid) {
  using namespace cute;
  using Element = typename Traits::Element;
  using fmha_sm90::barrier_arrive;
  using fmha_sm90::barrier_wait;
  using fmha_sm90::issue_gemm;
  constexpr int kValueBlock = Traits::kValueBlock;
  typename Traits::MmaScores mma_scores;
  typename Traits::MmaQueryState mma_query_state;
  typename Traits::MmaProbabilityValues mma_values;
  auto thread_scores = mma_scores.get_thread_slice(wg_tid);
  auto thread_query_state = mma_query_state.get_thread_slice(wg_tid);
  auto thread_values = mma_values.get_thread_slice(wg_tid);
  Tensor acc_s = partition_fragment_C(mma_scores, Shape<_64, _64>{});
  Tensor acc_o = partition_fragment_C(mma_query_state, Shape<_64, Int<kValueBlock>>{});
  Tensor tOrP = make_tensor<Element>(partition_shape_A(mma_values, Shape<_64, _64>{}));
  static_assert(decltype(size(tOrP))::value == decltype(size(acc_s))::value, "P fills the A fragment");
  static_assert(decltype(size(acc_o))::value == kValueBlock / 2, "one m64nE accumulator");

  const int lane = wg_tid % 32;
  const int row_lo = 16 * (wg_tid / 32) + lane / 4;  // the thread's rows: row_lo and row_lo + 8
  const int col0 = 2 * (lane % 4);
  const float log2_gamma = w.log2_gamma;
  const float scale = w.scale;
  const float state_factor_lo = scale * decay_power(log2_gamma, static_cast<float>(row_lo + 1));
  const float state_factor_hi = scale * decay_power(log2_gamma, static_cast<float>(row_lo + 9));
  auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + w.b * p.out.batch + w.h * p.out.head +
                   static_cast<int64_t>(w.slice) * kValueBlock;
  const bool vector_access = p.vector_access != 0;
  constexpr int kOutputs = Traits::kOutputWarpgroups;
  const int output_barrier = 2 + output;  // named barrier among this warpgroup's threads (the state's is 1)
  const uint32_t out_rows = shared_address(ss.out_rows[output]);

  // Chunk `chunk`'s rows from acc_o, element-wise (any stride); rows past the sequence's end are not written.
  auto store_rows = [&](int64_t chunk) {
    const int length = w.chunk_length(chunk);
    Element* const row_starts[2] = {out_base + (w.chunk_begin(chunk) + row_lo) * p.out.token + col0,
                                    out_base + (w.chunk_begin(chunk) + row_lo + 8) * p.out.token + col0};
    CUTE_UNROLL
    for (int pair = 0; pair < size(acc_o) / 2; ++pair) {
      if (row_lo + 8 * (pair & 1) < length) {
        const uint32_t bits = fmha::pack_pair<Element>(acc_o(2 * pair), acc_o(2 * pair + 1));
        auto* halves = reinterpret_cast<uint16_t*>(row_starts[pair & 1] + 8 * (pair >> 1));
        halves[0] = static_cast<uint16_t>(bits & 0xffffu);
        halves[1] = static_cast<uint16_t>(bits >> 16);
      }
    }
  };
  // acc_o as 16 bits into the output-rows tile (stmatrix), once every output thread has read the previous chunk's rows
  // from it.
  auto stage_rows = [&] {
    named_barrier_sync(output_barrier, Traits::kWarpgroupThreads);
    store_accumulator_rows<Element, kValueBlock>(acc_o, 0, out_rows, 64 * 128, wg_tid);
  };
  // Chunk `chunk`'s staged rows to global memory: thread t takes 16-byte piece t % 8 of rows t / 8 + 16 k of each
  // 64-column block; rows past the sequence's end are not written.
  auto store_staged_rows = [&](int64_t chunk) {
    constexpr int kPasses = 64 * kValueBlock * 2 / 16 / Traits::kWarpgroupThreads;  // pieces a thread
    named_barrier_sync(output_barrier, Traits::kWarpgroupThreads);
    const int length = w.chunk_length(chunk);
    Element* const chunk_out = out_base + w.chunk_begin(chunk) * p.out.token;
    // A batch's shared loads first, then its stores: one shared-memory latency a batch. Every piece in one batch
    // where two output warpgroups share the registers (D = 64); one piece a batch elsewhere, where a batch's loads
    // would spill.
    constexpr int kBatch = Traits::kOutputWarpgroups == 2 ? kPasses : 1;
#pragma unroll 1
    for (int first = 0; first < kPasses; first += kBatch) {
      uint4 bits[kBatch];
      CUTE_UNROLL
      for (int k = 0; k < kBatch; ++k) {
        const int piece = wg_tid + Traits::kWarpgroupThreads * (first + k);
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(bits[k].x), "=r"(bits[k].y), "=r"(bits[k].z), "=r"(bits[k].w)
                     : "r"(out_rows + static_cast<uint32_t>(piece / (64 * 8) * 64 * 128) +
                           swizzled_offset((piece / 8) % 64, 8 * (piece % 8))));
      }
      CUTE_UNROLL
      for (int k = 0; k < kBatch; ++k) {
        const int piece = wg_tid + Traits::kWarpgroupThreads * (first + k);
        const int block = piece / (64 * 8);
        const int row = (piece / 8) % 64;
        const int col = 8 * (piece % 8);
        // One 16-byte store, in PTX: nvcc splits a uint4 assignment through the Element pointer into four 4-byte
        // stores.
        if (row < length) {
          asm volatile(
              "st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(chunk_out + row * p.out.token + 64 * block + col),
              "r"(bits[k].x), "r"(bits[k].y), "r"(bits[k].z), "r"(bits[k].w)
              : "memory");
        }
      }
    }
  };

  // Score value v of the thread (query row i, key j in the chunk) after the decay mask.
  auto masked_score = [&](int v, float score, float mask_log2_gamma) {
    const int i = row_lo + 8 * ((v >> 1) & 1);
    const int j = 8 * (v >> 2) + col0 + (v & 1);
    return masked_decayed_score(score, mask_log2_gamma, i, j, scale);
  };
  // The decay mask's values of the thread's scores (Traits::kHoldDecay: held across the chunk loop).
  float decay[decltype(size(acc_s))::value];
  if constexpr (Traits::kHoldDecay) {
    CUTE_UNROLL
    for (int v = 0; v < size(acc_s); ++v) decay[v] = masked_score(v, 1.0f, log2_gamma);
  }

  const ValueScaling<Traits, Traits::kWarpgroupThreads, Traits::kHoldDecay> scaling(wg_tid, log2_gamma);

  // This warpgroup's chunks: output, output + kOutputs, ...; chunk c in stage c % kStages, its phase (c / kStages) % 2.
  // A parity wait skipping chunks is exact: the producer announces chunks in order (each thread's cp.async arrivals
  // follow its copies in order), so the chunk this warpgroup saw before (c - kOutputs) implies that the stage's
  // previous phase (chunk c - kStages < c - kOutputs) has completed; and chunk c + kStages cannot load before this
  // warpgroup releases chunk c.
  static_assert(kOutputs < Traits::kStages, "one wrap of the stage ring a step");
  int stage = output;
  uint32_t phase = 0;
  uint32_t visit = 0;  // (chunk / kOutputs) % 2: the phase of this warpgroup's state_ready
#pragma unroll 1
  for (int64_t chunk = output; chunk < w.chunks; chunk += kOutputs) {
    // The stage's operand descriptors, built here from opaque addresses: hoisted out of the loop, every k-step's
    // descriptor of both stages would stay in registers.
    Tensor sQ = make_tensor(make_smem_ptr(opaque(ss.q + stage * Traits::kQkStageElements)),
                            typename Traits::LayoutQKStage{});  // (token, d)
    Tensor sK =
        make_tensor(make_smem_ptr(opaque(ss.k + stage * Traits::kQkStageElements)), typename Traits::LayoutQKStage{});
    Tensor sS = make_tensor(make_smem_ptr(opaque(ss.state[output])), typename Traits::LayoutState{});  // (e, d)
    Tensor tSrQ = thread_scores.partition_fragment_A(sQ);                                              // (MMA, 1, K)
    Tensor tSrK = thread_scores.partition_fragment_B(sK);
    Tensor tOrQ = thread_query_state.partition_fragment_A(sQ);
    Tensor tOrS = thread_query_state.partition_fragment_B(sS);
    barrier_wait(&ss.full[stage], phase);
    fmha_sm90::fence_generic_to_async_shared();  // the copies, for this thread's wgmma reads
    warpgroup_fence_operand(acc_s);
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    issue_gemm<false>(mma_scores, tSrQ, tSrK, acc_s);
    warpgroup_commit_batch();
    if constexpr (Traits::kOutputsScaleValues) {
      // V~ of this chunk for the state update, into this warpgroup's scaled-V tile once the update of its previous
      // chunk has read it; fenced before the stores of the previous chunk's rows (a fence waits for the thread's
      // earlier stores).
      if (chunk >= kOutputs) barrier_wait(&ss.values_free[output], visit ^ 1u);
      uint4 scaled[decltype(scaling)::kPieces];
      scaling.load(ss, stage, w.chunk_length(chunk), scaled);
      scaling.store(ss, output, scaled);
      fmha_sm90::fence_generic_to_async_shared();
      barrier_arrive(&ss.values_scaled[output]);
    }
    // The previous chunk's rows go out after this chunk's proxy fence, which would otherwise wait for their stores.
    if (chunk >= kOutputs) {
      if (vector_access) {
        store_staged_rows(chunk - kOutputs);
      } else {
        store_rows(chunk - kOutputs);
      }
    }
    barrier_wait(&ss.state_ready[output], visit);
    visit ^= 1u;
    warpgroup_arrive();
    issue_gemm<false>(mma_query_state, tOrQ, tOrS, acc_o);
    warpgroup_commit_batch();

    // Scores -> P while Q S runs. The mask's powers are the same every chunk: held in registers where the traits
    // say so, else recomputed (opaque) rather than held across the loop.
    warpgroup_wait<1>();
    warpgroup_fence_operand(acc_s);
    if constexpr (Traits::kHoldDecay) {
      CUTE_UNROLL
      for (int v = 0; v < size(acc_s); ++v) acc_s(v) *= decay[v];
    } else {
      const float chunk_log2_gamma = opaque(log2_gamma);
      CUTE_UNROLL
      for (int v = 0; v < size(acc_s); ++v) acc_s(v) = masked_score(v, acc_s(v), chunk_log2_gamma);
    }
    fmha_sm90::pack_accumulator<Element>(acc_s, tOrP);

    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_o);
    barrier_arrive(&ss.state_free[output]);
    CUTE_UNROLL
    for (int v = 0; v < size(acc_o); ++v) acc_o(v) *= ((v >> 1) & 1) ? state_factor_hi : state_factor_lo;
    warpgroup_fence_operand(acc_o);
    warpgroup_fence_operand(tOrP);
    warpgroup_arrive();
    Tensor sV = make_tensor(make_smem_ptr(opaque(ss.v + stage * Traits::kVStageElements)),
                            typename Traits::LayoutVStage{});  // (e, token)
    Tensor tOrV = thread_values.partition_fragment_B(sV);      // (MMA, 1, keys / 16)
    issue_gemm<true>(mma_values, tOrP, tOrV, acc_o);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_o);
    warpgroup_fence_operand(tOrP);
    barrier_arrive(&ss.empty[stage]);
    if (vector_access) stage_rows();
    stage += kOutputs;
    if (stage >= Traits::kStages) {
      stage -= Traits::kStages;
      phase ^= 1u;
    }
  }
  if (output < w.chunks) {
    const int64_t last = w.chunks - 1 - (w.chunks - 1 - output) % kOutputs;  // this warpgroup's last chunk
    if (vector_access) {
      store_staged_rows(last);
    } else {
      store_rows(last);
    }
  }
}

}  // namespace attnkit::cuda::retention
