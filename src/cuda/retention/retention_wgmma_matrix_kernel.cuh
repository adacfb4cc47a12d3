// The parallel retention forward over an explicit decay matrix on Hopper (SM90a: wgmma, mbarriers, warp
// specialisation): o_t = sum_m s_tm v_m with s_tm = scale * (q_t . k_m) * D[h, t, m], divided by max(sum_m |s_tm|, 1)
// with RetNet's normalisation (p.decay.normalize), the matrix D [H|1, Tq, Tk] in float32 or the inputs' 16 bits. It
// computes what the normalised-form kernel computes over a matrix (retention_normalized_kernel.cuh) with the same
// ChunkParams, for calls whose operands allow 16-byte copies (p.vector_access and p.decay.vector_rows; the plan
// keeps the other kernel for the others).
//
// Algorithm. Two launches. The first (retention_decay_map_kernel.cuh) reads the matrix once and writes a map of its
// nonzero 128 x 64 tiles. In the second, one CTA owns one (head, 128 query rows, batch, slice of E value columns), in
// clusters of 2 CTAs (batches b, b + 1 of the same rows; 1 for one batch; the kernel takes 4 too: matrix_cluster_size)
// that share the matrix's tiles, and walks the key
// blocks of 64 that the map marks nonzero for its rows: a producer warpgroup (retention_wgmma_matrix_producer.cuh: Q
// once, then per block the matrix's tile, each CTA multicasting its share of the rows into all, and the block's K and V
// into a ring of stages) and two consumer warpgroups of 64 query rows (retention_wgmma_matrix_consumer.cuh: S = Q K^T,
// s = scale S D, O += P V on wgmma; no softmax, so the accumulators are never rescaled and the row normaliser is
// divided out once at the end). All-zero tiles cost the map's read alone: neither their entries, K, V nor their
// products are touched again.
//
// Work and bytes, B8 T4096 H16 Dk = Dv = 128 (one CTA per (b, h, 128 rows), E = 128), a causal float32 matrix
// [16, 4096, 4096] (1 GiB): the map reads 1 GiB from DRAM (about 0.25 ms); the second launch's 4096 CTAs walk 33 of
// the 64 blocks on average: into the SMs 2048 clusters of 2 x 33 x 32 KiB of matrix (2.1 GiB, half of what
// unclustered CTAs read) and 4096 x 33 x 32 KiB of K and V (4.1 GiB); DRAM sees each nonzero tile about once more (0.5
// GiB: the clusters of a (head, query block) run side by side). Products 2 x 128 x 64 x (Dk + Dv) per block, 0.57 TFLOP
// in all (the normalised-form kernel also repeats Q K^T per 64 value columns). On other architectures the kernel body
// is empty: the plan selects it only on a compute capability 9.0 device (retention_plan.cpp).
#pragma once
#include <cute/tensor.hpp>

#include <cuda.h>

#include "cuda/common/cluster_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_matrix_consumer.cuh"
#include "cuda/retention/retention_wgmma_matrix_producer.cuh"
#include "cuda/retention/retention_wgmma_matrix_traits.cuh"

namespace attnkit::cuda::retention {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    retention_wgmma_matrix_kernel(const __grid_constant__ ChunkParams p, const __grid_constant__ CUtensorMap matrix) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Storage = typename Traits::SharedStorage;
  extern __shared__ __align__(1024) char smem[];
  Storage& ss = *reinterpret_cast<Storage*>(smem);
  const uint32_t cluster = cluster_size();
  const uint32_t rank = cluster_rank();
  const MatrixWalk walk = matrix_walk(p, blockIdx.x, static_cast<int>(cluster));
  const int tid = static_cast<int>(threadIdx.x);
  // Broadcast from lane 0 so that the compiler sees the role branches as warp-uniform.
  const int warp_group = __shfl_sync(0xffffffffu, tid / Traits::kWarpgroupThreads, 0);
  if (tid == 0) {
    fmha_sm90::barrier_init(&ss.q_full, Traits::kWarpgroupThreads);
    for (int s = 0; s < Traits::kStages; ++s) {
      // The producer threads' K/V arrivals, and thread 0's with the matrix bytes of both CTAs' boxes.
      fmha_sm90::barrier_init(&ss.full[s], Traits::kWarpgroupThreads + 1);
      // Every consumer thread of the cluster.
      fmha_sm90::barrier_init(&ss.empty[s], cluster * Traits::kConsumers * Traits::kWarpgroupThreads);
    }
    fmha_sm90::barrier_init_fence();
  }
  cluster_sync();  // every CTA's barriers are initialised before any CTA's boxes or arrivals reach them
  const int wg_tid = tid % Traits::kWarpgroupThreads;
  if (warp_group == 0) {
    fmha_sm90::warpgroup_registers_shrink<Traits::kProducerRegisters>();
    wgmma_matrix_produce<Traits>(p, &matrix, walk, ss, rank, cluster, wg_tid);
  } else {
    fmha_sm90::warpgroup_registers_grow<Traits::kConsumerRegisters>();
    wgmma_matrix_consume<Traits>(p, walk, ss, cluster, warp_group - 1, wg_tid);
  }
  cluster_sync();  // no CTA leaves while another's boxes or arrivals may still reach its shared memory
#endif
}

}  // namespace attnkit::cuda::retention
