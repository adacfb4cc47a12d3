// The Hopper fused-attention forward kernel (SM90a: wgmma, mbarriers, warp specialisation), one CTA
// per (Q tile of 192, 128 or 64 queries, query head or p.heads_per_cta heads in turn, batch) — the portable tier's
// grid, tiles and mask policies.
//
// Algorithm: FlashAttention-2 with warp specialisation. Warpgroup 0 produces (Sm90Producer: gathers Q
// once, then K and V of each listed KV tile into two stage buffers each — TMA boxes when `maps` is
// enabled, else cp.async row gathers — announced through mbarriers),
// the next warpgroups consume 64 query rows each (three for 192-row tiles, two for 128, one for 64; Sm90Consumer: wgmma
// Q*K^T, masks, online softmax, wgmma P*V, epilogue). The producer gives up registers (setmaxnreg) so the
// consumers can keep O, S and P of 64 rows in registers (Sm90FmhaTraits: the CTAs per SM and the registers). Thread 0
// initialises the mbarriers first, so that the Q tile (one TMA box per 64 columns where the maps allow, else cp.async)
// and, with TMA, the first K/V tile are in flight during the setup every thread then does (policy state, mask tables)
// before the split. On other architectures the kernel body is empty: the registry never selects it there
// (fmha_sm90_launch.cuh checks the device).
#pragma once
#include <cute/tensor.hpp>

#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_consumer.cuh"
#include "cuda/fmha_sm90/fmha_sm90_producer.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

namespace attnkit::cuda::fmha_sm90 {

template <class Traits, class Policy>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    fmha_sm90_forward_kernel(const __grid_constant__ fmha::FmhaParams p, const __grid_constant__ Sm90TileMaps maps) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using PolicyTraits = typename Traits::PolicyTraits;
  using Storage = typename Traits::SharedStorage;
  extern __shared__ __align__(1024) char smem[];
  Storage& ss = *reinterpret_cast<Storage*>(smem);
  const int tid = static_cast<int>(threadIdx.x);
  const int ctid = tid - Traits::kProducerThreads;  // consumer thread index, < 0 for the producer
  // The warpgroup index, broadcast from lane 0 so that the compiler sees the role branches as
  // warp-uniform (wgmma in a branch it thinks divergent is serialised).
  const int warp_group = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (tid == 0) {
    // Q with TMA: one arrival (thread 0's, with the tile's byte count); with cp.async every producer thread's.
#pragma unroll
    for (int b = 0; b < Traits::kQBuffers; ++b) {
      barrier_init(&ss.q_full[b], maps.q_enabled ? 1 : Traits::kProducerThreads);
      barrier_init(&ss.q_empty[b], Traits::kConsumerThreads);
    }
    // TMA: one arrival (with the stage's byte count) per fill; cp.async: every producer thread arrives.
    const uint32_t fill_arrivals = maps.enabled ? 1 : Traits::kProducerThreads;
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      barrier_init(&ss.k_full[s], fill_arrivals);
      barrier_init(&ss.v_full[s], fill_arrivals);
      barrier_init(&ss.k_empty[s], Traits::kConsumerThreads);
      barrier_init(&ss.v_empty[s], Traits::kConsumerThreads);
    }
    barrier_init_fence();
  }
  fmha::CtaTile cta = fmha::resolve_cta(p);
  if constexpr (!Traits::kPowerOfTwoRows) {
    // A flat query side (dense, causal, 1-D windows; the host refuses others): tile t starts at row t * BlockM, its
    // box of 2^box_log2 >= BlockM rows maps row r to token first + r.
    cta.q.index[0] = cta.q_tile[0] * Traits::kBlockM;
    cta.valid = cta.q.index[0] < cta.n_q[0];
  }
  if (!cta.valid) return;
  // Query heads cta.head .. cta.head + heads - 1 in turn (more than one only for box masks on the TMA path:
  // fmha_sm90_heads_per_cta.hpp).
  cta.head = static_cast<int32_t>(blockIdx.y) * p.heads_per_cta;
  const int heads = Traits::kSeveralHeadsPerCta ? min(p.heads_per_cta, p.heads_q - cta.head) : 1;
  if (warp_group == 0) Sm90Producer<Traits, Policy>::issue_q(p, cta, ss, maps, tid, 0);  // lands during the setup
  Policy policy;
  policy.init(p, cta, ss.policy, ss.policy_state, ctid < 0 ? -1 : ctid);
  // Thread 0 initialised the barriers itself: the first K/V tile goes out before the setup barrier too.
  if (tid == 0 && maps.enabled) Sm90Producer<Traits, Policy>::issue_first_kv(p, cta, policy, ss, maps);
  int row_of[PolicyTraits::kRows];
  if (ctid >= 0) {
    int col_of[PolicyTraits::kCols];
#pragma unroll
    for (int i = 0; i < PolicyTraits::kRows; ++i) row_of[i] = fmha::score_row<PolicyTraits>(ctid, i);
#pragma unroll
    for (int j = 0; j < PolicyTraits::kCols; ++j) col_of[j] = fmha::score_col<PolicyTraits>(ctid, j);
    policy.prepare_shared(p, cta, col_of, ctid);
  }
  __syncthreads();  // barriers, policy state and mask tables published

  if (warp_group == 0) {
    warpgroup_registers_shrink<Traits::kProducerRegisters>();
    Sm90Producer<Traits, Policy>{}(p, cta, heads, policy, ss, maps, tid);
  } else {
    warpgroup_registers_grow<Traits::kConsumerRegisters>();
    Sm90Consumer<Traits, Policy>{}(p, cta, heads, policy, ss, row_of, ctid, warp_group - 1);
  }
#endif
}

}  // namespace attnkit::cuda::fmha_sm90
