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
// Work per chunk and CTA at D = 128, E = 64 (one m64n64k16 wgmma = 131 kFLOP, 32 cycles of an SM's tensor cores at
// 4 096 FLOP/cycle: H100 SXM dense bf16, 989 TFLOP/s on 132 SMs at 1.83 GHz): output Q K^T 1.05 MFLOP (8 wgmmas: the
// causal half is computed, not skipped) + Q S 1.05 (8) + P V 0.52 (4), state 1.05 (8): 28 wgmmas, ~900 tensor
// cycles, of which the output warpgroup's 20 are its chain. Shared memory per chunk and CTA: wgmma operand reads
// 104 KB (an SS m64n64k16 reads 2 KB of A and 2 KB of B: Q K^T 32, Q S 32, P V 8 (B only), state 32), V read for the
// scaling 8 KB, writes 64 KB (copies 40, scaled V 8, state tile 16): ~176 KB, ~1 400 cycles at 128 B/cycle, more
// than the tensor cycles. B8 T4096 H16 D128 (256 CTAs, one wave of 2 per SM on 132 SMs, 64 chunks each): ~115 000
// tensor and ~176 000 shared-memory cycles per SM, 0.06 and 0.10 ms at 1.83 GHz; DRAM reads q, k, v and writes out
// once (Q and K are shared by the Dv / E slices of a head through L2; the CTA order makes them neighbours): 537 MB,
// 0.16 ms at 3.35 TB/s (H100), 0.11 ms at 4.8 TB/s (H200), the floor.
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
    wgmma_chunk_produce<Traits>(p, walk, ss, wg_tid);
  } else if (warp_group == 1) {
    fmha_sm90::warpgroup_registers_grow<Traits::kConsumerRegisters>();
    if (!walk.state_only) wgmma_chunk_outputs<Traits>(p, walk, ss, wg_tid);
  } else {
    fmha_sm90::warpgroup_registers_grow<Traits::kConsumerRegisters>();
    wgmma_chunk_state<Traits>(p, walk, ss, wg_tid);
  }
#endif
}

}  // namespace attnkit::cuda::retention
