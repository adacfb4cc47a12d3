// Chunkwise retention on Hopper (SM90a: wgmma, mbarriers, warp specialisation): the jobs of retention_params.hpp (the
// forward, and the backward's three time-reversed or operand-swapped forwards, retention_jobs.hpp), computing what the
// mma.sync chunk kernel (retention_chunk_kernel.cuh) computes with the same ChunkParams, CTA order, segments,
// initial/final state and factors (the backward's state-gradient factors included); retention_wgmma_chunk_jobs_kernel
// runs several jobs of one instance in one grid, as retention_chunk_jobs_kernel does.
//
// Algorithm. One CTA owns one (batch, head, slice of E value columns, segment) and walks its tokens in chunks of
// C = 64 (rows past the end are zeros); E = 64, or E = 128 at D = 128 (retention_wgmma_chunk_traits.cuh). Per chunk
// with L real tokens and S the state before it:
//   scores   A = Q K^T
//   masked   P_ij = scale * gamma^(i-j) * A_ij for i >= j, else 0 (fp32 accumulators, then 16 bits in registers)
//   output   O = diag(scale * gamma^(i+1)) Q S + P V
//   state    S <- gamma^L S + K^T diag(gamma^(L-1-j)) V
// Warpgroups: a producer (retention_wgmma_chunk_producer.cuh: cp.async of Q, K, V into a ring of kStages stages,
// running ahead of the consumers until the ring is full; it gives registers back with setmaxnreg), the output
// warpgroup (retention_wgmma_chunk_output.cuh: the first three lines, 64 rows, wgmma m64nE; at D = 64 two output
// warpgroups taking alternate chunks) and E / 64 state warpgroups (retention_wgmma_chunk_state.cuh: the last line, S
// fp32 [D, E] in wgmma accumulators, D / (E / 64) rows each). The roles share the stages' tiles (mbarriers full /
// empty) and, per output warpgroup, a 16-bit copy of S in shared memory (state_ready / state_free): an output
// warpgroup issues chunk c's Q K^T before it waits for the state tile, so the state update of chunk c - 1 (and the
// writing of the tile) overlaps the P V and stores of chunk c - 1 and Q K^T of chunk c. At D = 64 the output work of a
// chunk (the mask, the packing, the stores and the issue of 12 wgmmas against the state's 4) bounds a CTA alone on its
// multiprocessor; two output warpgroups run two chunks' output at once, and each also scales its chunk's V for the
// state update (values_scaled / values_free), so that the state warpgroup's chain a chunk is the update and the
// state tile's round trip (clock traces on an H200: that chain and each output warpgroup's over its two chunk periods
// set the pace together, ~1 750 cycles a chunk; docs/perf.md, retention "Nineteenth step").
//
// Work per chunk (one m64nNk16 wgmma = N / 64 x 131 kFLOP, N / 2 cycles of an SM's tensor cores at 4 096 FLOP/cycle:
// H100 SXM dense bf16, 989 TFLOP/s on 132 SMs at 1.83 GHz; an SS one reads 2 KB of A and N / 32 KB of B from shared
// memory, an RS one B only):
//   E = 64, D = 128 (a CTA; two per SM): output Q K^T 8 m64n64k16 (the causal half is computed, not skipped), Q S 8
//     m64n64, P V 4 m64n64, state 8 m64n64: 28 wgmmas, 896 tensor cycles, the output warpgroup's 20 (640) its
//     chain. Shared memory: operand reads 104 KB (Q K^T 32, Q S 32, P V 8, state 32), V read for the scaling 8 KB,
//     writes 64 KB (copies 40, scaled V 8, state tile 16): ~176 KB, ~1 400 cycles at 128 B/cycle.
//   E = 128, D = 128 (a CTA; one per SM; the same 128 value columns as two E = 64 CTAs): output Q K^T 8 m64n64
//     (once per head, where two E = 64 CTAs compute it twice), Q S 8 m64n128, P V 4 m64n128, state 2 x 4 m64n128
//     (one m64 tile per state warpgroup): 28 wgmmas, 1 536 tensor cycles (two E = 64 CTAs: 1 792), the output
//     warpgroup's 20 (1 024) its chain. Shared memory: operand reads 144 KB (Q K^T 32, Q S 48, P V 16, state 48),
//     V read 16 KB, writes 96 KB (copies 48, scaled V 16, state tile 32): ~256 KB, ~2 000 cycles (two E = 64 CTAs:
//     352 KB, ~2 750). L2 to SM: 48 KB of copies where two E = 64 CTAs copy 80 KB.
// B8 T4096 H16 D128, 64 chunks per CTA: E = 64 runs 256 CTAs in one wave of 2 per SM on 132 SMs, ~115 000 tensor and
// ~176 000 shared-memory cycles per SM (0.06 and 0.10 ms at 1.83 GHz); E = 128 runs 128 CTAs in one wave of 1 per SM,
// ~98 000 and ~128 000 cycles (0.054 and 0.07 ms). DRAM reads q, k, v and writes out once (Q and K are shared by the
// Dv / E slices of a head through L2; the CTA order makes them neighbours): 537 MB, 0.16 ms at 3.35 TB/s (H100),
// 0.11 ms at 4.8 TB/s (H200), the floor.
//
// Registers a thread (setmaxnreg; the launch bound gives 128 at D = 64 (512 threads), 80 at D = 128 and E = 64, 128 at
// E = 128): producer 40 / 32 / 48, output 168 / 104 / 176 (E = 128: O 64 fp32, scores 32, P 16; D = 64: also the 32
// values of the decay mask, held across the chunk loop), state 136 / 104 / 144 (E = 128: S 64 fp32, scaled V 16).
// Shared memory (16-bit elements, 128-byte swizzled rows): Q, K [kStages][64][D], V [kStages][64][E], scaled V
// [64][E] (at D = 64 one per output warpgroup), per output warpgroup output rows [64][E] and a state tile [D][E], with
// kStages as many as fit (at most 5 at D = 64, 3 else): D = 64: 5 stages, 169 KiB (one CTA per SM, by its registers);
// D = 128, E = 64: 2 stages, 113 KiB (two CTAs per SM each); D = 128, E = 128: 3 stages, 209 KiB (one CTA per SM).
//
// The state-only launch of a segmented job (retention_params.hpp) runs the producer (K and V) and the state
// warpgroups alone, one CTA a part of a segment (ChunkParams::state_splits parts, so that the launch fills the device);
// the output warpgroups leave at once. The outputs launch follows it as a programmatic dependent: its CTAs start as
// multiprocessors free up, segment 0's run through, the others' state warpgroups wait for the state-only grid before
// they read the parts' states. On other architectures the kernel body is empty: the plan
// selects this kernel only on a compute capability 9.0 device (retention_jobs.hpp, wgmma_chunk_kernel_for).
#pragma once
#include <cute/tensor.hpp>

#include "cuda/common/programmatic_launch.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_output.cuh"
#include "cuda/retention/retention_wgmma_chunk_producer.cuh"
#include "cuda/retention/retention_wgmma_chunk_state.cuh"
#include "cuda/retention/retention_wgmma_chunk_traits.cuh"
#include "cuda/retention/retention_wgmma_chunk_walk.cuh"

namespace attnkit::cuda::retention {

// One CTA's walk: CTA `cta` of the job `p`.
template <class Traits>
__device__ __forceinline__ void wgmma_chunk_cta(const ChunkParams& p, int64_t cta) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Storage = typename Traits::SharedStorage;
  extern __shared__ __align__(1024) char smem[];
  Storage& ss = *reinterpret_cast<Storage*>(smem);
  const WgmmaChunkWalk walk = wgmma_chunk_walk(p, cta);
  // The outputs launch that follows the state-only launch (a programmatic dependent) may start at once: its CTAs
  // wait for this grid only where they read the parts' states (wait_for_preceding_grid,
  // retention_wgmma_chunk_state.cuh).
  if (walk.state_only) signal_dependents();
  if (walk.idle) return;
  const int tid = static_cast<int>(threadIdx.x);
  // Broadcast from lane 0 so that the compiler sees the role branches as warp-uniform (wgmma in a branch it thinks
  // divergent is serialised).
  const int warp_group = __shfl_sync(0xffffffffu, tid / Traits::kWarpgroupThreads, 0);
  if (tid == 0) {
    for (int s = 0; s < Traits::kStages; ++s) {
      fmha_sm90::barrier_init(&ss.full[s], Traits::kWarpgroupThreads);
      // The state-only launch has no output warpgroup: the state warpgroups alone release a stage.
      fmha_sm90::barrier_init(&ss.empty[s],
                              (Traits::kStateWarpgroups + (walk.state_only ? 0 : 1)) * Traits::kWarpgroupThreads);
    }
    for (int o = 0; o < Traits::kOutputWarpgroups; ++o) {
      fmha_sm90::barrier_init(&ss.state_ready[o], Traits::kStateWarpgroups * Traits::kWarpgroupThreads);
      fmha_sm90::barrier_init(&ss.state_free[o], Traits::kWarpgroupThreads);
      fmha_sm90::barrier_init(&ss.values_scaled[o], Traits::kWarpgroupThreads);
      fmha_sm90::barrier_init(&ss.values_free[o], Traits::kStateWarpgroups * Traits::kWarpgroupThreads);
    }
    fmha_sm90::barrier_init_fence();
  }
  __syncthreads();
  const int wg_tid = tid % Traits::kWarpgroupThreads;
  if (warp_group == 0) {
    fmha_sm90::warpgroup_registers_shrink<Traits::kProducerRegisters>();
    wgmma_chunk_produce<Traits>(p, walk, ss, wg_tid);
  } else if (warp_group <= Traits::kOutputWarpgroups) {
    fmha_sm90::warpgroup_registers_grow<Traits::kOutputRegisters>();
    if (!walk.state_only) wgmma_chunk_outputs<Traits>(p, walk, ss, warp_group - 1, wg_tid);
  } else {
    fmha_sm90::warpgroup_registers_grow<Traits::kStateRegisters>();
    wgmma_chunk_state<Traits>(p, walk, ss, warp_group - 1 - Traits::kOutputWarpgroups, wg_tid);
  }
#endif
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    retention_wgmma_chunk_kernel(const __grid_constant__ ChunkParams p) {
  wgmma_chunk_cta<Traits>(p, blockIdx.x);
}

// Several jobs in one grid (retention_params.hpp's ChunkJobs: the backward's jobs that share an instance; job_cta maps
// a grid CTA to its job's).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    retention_wgmma_chunk_jobs_kernel(const __grid_constant__ ChunkJobs jobs) {
  const int64_t cta = blockIdx.x;
  const JobCta at = job_cta(jobs, cta);
  wgmma_chunk_cta<Traits>(jobs.jobs[at.job], at.cta);
}

}  // namespace attnkit::cuda::retention
