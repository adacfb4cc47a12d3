// Chunkwise retention on Hopper (SM90a: wgmma, mbarriers, warp specialisation): the forward job of
// retention_params.hpp, computing what the mma.sync chunk kernel (retention_chunk_kernel.cuh) computes with the same
// ChunkParams, CTA order, segments, initial/final state and factors.
//
// Algorithm. One CTA owns one (batch, head, slice of E = 64 value columns, segment) and walks its tokens in chunks
// of C = 64 (rows past the end are zeros). Per chunk with L real tokens and S the state before it:
//   scores   A = Q K^T
//   masked   P_ij = scale * gamma^(i-j) * A_ij for i >= j, else 0 (fp32 accumulators, then 16 bits in registers)
//   output   O = diag(scale * gamma^(i+1)) Q S + P V
//   state    S <- gamma^L S + K^T diag(gamma^(L-1-j)) V
// Three warpgroups: a producer (retention_wgmma_chunk_producer.cuh: cp.async of chunk c + 1's Q, K, V into the
// second of two stages while chunk c is computed; it gives registers back with setmaxnreg), the output warpgroup
// (retention_wgmma_chunk_output.cuh: the first three lines, 64 rows, wgmma m64) and the state warpgroup
// (retention_wgmma_chunk_state.cuh: the last line, S fp32 [D, E] in wgmma accumulators). The roles share the
// stage's tiles (mbarriers full / empty) and a 16-bit copy of S in shared memory (state_ready / state_free): the
// output warpgroup issues chunk c's Q K^T before it waits for the state tile, so the state warpgroup's update of
// chunk c - 1 (and its writing of the tile) overlaps the output warpgroup's P V and stores of chunk c - 1 and Q K^T
// of chunk c.
//
// Work per chunk and CTA at D = 128, E = 64 (one m64n64k16 wgmma = 131 kFLOP, ~64 tensor cycles of an SM): output
// Q K^T 1.05 MFLOP (8 wgmmas: the causal half is computed, not skipped) + Q S 1.05 (8) + P V 0.52 (4) = 2.6 MFLOP,
// state 1.05 MFLOP (8): 28 wgmmas, ~1 800 tensor cycles, of which the output warpgroup's 20 are its critical path;
// 64 chunks x 2 CTAs per SM at B8 T4096 H16 D128 (256 CTAs, one wave of 264 slots on 132 SMs) is ~230 000 cycles,
// ~0.13 ms at 1.75 GHz. Shared-memory operand reads per chunk (wgmma) ~150 KB (Q twice, K twice, V twice, the state
// tile, the scaled V), writes 48 KB (copies, scaled V, state tile); DRAM per chunk: Q, K 16 KB each (shared by the
// Dv / E slices of a head through L2), V 8 KB, out 8 KB: at B8 T4096 H16 D128 the 537 MB of q, k, v, out take
// 0.16 ms at 3.35 TB/s (H100), the floor.
//
// Shared memory (16-bit elements, 128-byte swizzled rows: retention_wgmma_chunk_traits.cuh): Q, K [2][64][D],
// V [2][64][E], scaled V [64][E], state tile [D][E]: 104 KiB at D = 128, 64 KiB at D = 64 (two CTAs per SM).
//
// The state-only launch of a segmented job (retention_params.hpp) runs the producer (K and V) and the state
// warpgroup alone; the output warpgroup leaves at once. On other architectures the kernel body is empty: the plan
// selects this kernel only on a compute capability 9.0 device (retention_jobs.hpp, wgmma_chunk_kernel_for).
#pragma once
#include <cute/tensor.hpp>

#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_output.cuh"
#include "cuda/retention/retention_wgmma_chunk_producer.cuh"
#include "cuda/retention/retention_wgmma_chunk_state.cuh"
#include "cuda/retention/retention_wgmma_chunk_traits.cuh"
#include "cuda/retention/retention_wgmma_chunk_walk.cuh"

namespace attnkit::cuda::retention {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    retention_wgmma_chunk_kernel(const __grid_constant__ ChunkParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Storage = typename Traits::SharedStorage;
  extern __shared__ __align__(1024) char smem[];
  Storage& ss = *reinterpret_cast<Storage*>(smem);
  const WgmmaChunkWalk walk = wgmma_chunk_walk(p, blockIdx.x);
  if (walk.idle) return;
  const int tid = static_cast<int>(threadIdx.x);
  // Broadcast from lane 0 so that the compiler sees the role branches as warp-uniform (wgmma in a branch it thinks
  // divergent is serialised).
  const int warp_group = __shfl_sync(0xffffffffu, tid / Traits::kWarpgroupThreads, 0);
  if (tid == 0) {
    for (int s = 0; s < Traits::kStages; ++s) {
      fmha_sm90::barrier_init(&ss.full[s], Traits::kWarpgroupThreads);
      // The state-only launch has no output warpgroup: the state warpgroup alone releases a stage.
      fmha_sm90::barrier_init(&ss.empty[s], (walk.state_only ? 1 : 2) * Traits::kWarpgroupThreads);
    }
    fmha_sm90::barrier_init(&ss.state_ready, Traits::kWarpgroupThreads);
    fmha_sm90::barrier_init(&ss.state_free, Traits::kWarpgroupThreads);
    fmha_sm90::barrier_init_fence();
  }
  __syncthreads();
  const int wg_tid = tid % Traits::kWarpgroupThreads;
  if (warp_group == 0) {
    fmha_sm90::warpgroup_registers_shrink<Traits::kProducerRegisters>();
#ifndef XNO_PROD
    wgmma_chunk_produce<Traits>(p, walk, ss, wg_tid);
#endif
  } else if (warp_group == 1) {
    fmha_sm90::warpgroup_registers_grow<Traits::kConsumerRegisters>();
    if (!walk.state_only) wgmma_chunk_outputs<Traits>(p, walk, ss, wg_tid);
  } else {
    fmha_sm90::warpgroup_registers_grow<Traits::kConsumerRegisters>();
#ifndef XNO_STATE
    wgmma_chunk_state<Traits>(p, walk, ss, wg_tid);
#endif
  }
#endif
}

}  // namespace attnkit::cuda::retention
