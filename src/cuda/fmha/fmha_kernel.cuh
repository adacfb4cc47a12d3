// The portable fused-attention forward kernel (SM80+: mma.sync, ldmatrix, cp.async), one CTA per
// (Q tile, query head, batch).
//
// Algorithm: FlashAttention-2. The CTA loads its Q tile (BlockM tokens x the compiled head dim) once,
// then walks the KV tiles (BlockN tokens) its mask policy lists, keeping the output accumulator and the
// online-softmax statistics of its BlockM rows in registers (fp32), and finally normalises and stores
// O and the LSE. Tiles are boxes of tokens (fmha_tokens.cuh); the policy (BoxPolicy or
// TileListPolicy) decides which KV tiles to visit, which of them are full, and how partial tiles are
// masked (and, for neighborhoods, whether a positional bias is added: fmha_positional_bias.cuh). Shared memory
// (FmhaTraits): Q (reused for O), one K and one V buffer, the policy's mask tables, per-CTA state (KV head offsets,
// tile ranges) and two tables of KV row addresses. GQA/MQA: query head h reads KV head h / (Hq / Hkv).
#pragma once
#include <cute/tensor.hpp>

#include "cuda/fmha/fmha_epilogue.cuh"
#include "cuda/fmha/fmha_mainloop.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Traits, class Policy>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinCtasPerSm)
    fmha_forward_kernel(const __grid_constant__ FmhaParams p) {
  using namespace cute;
  using Element = typename Traits::Element;
  extern __shared__ __align__(128) char smem[];
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Element* smem_k = reinterpret_cast<Element*>(smem + Traits::kTileBytesQ);
  Element* smem_v = reinterpret_cast<Element*>(smem + Traits::kTileBytesQ + Traits::kTileBytesKV);
  char* policy_smem = smem + Traits::kTileBytesQ + 2 * Traits::kTileBytesKV;
  const int tid = static_cast<int>(threadIdx.x);

  // Per-CTA state: K's and V's batch + KV-head offsets, then the policy's tile ranges.
  int64_t* kv_head_offsets = reinterpret_cast<int64_t*>(policy_smem + Traits::kWindowBytes + Traits::kPrefixBytes);
  void* policy_state = kv_head_offsets + 2;
  using Mainloop = FmhaMainloop<Traits, Policy>;
  auto* row_tables = reinterpret_cast<typename Mainloop::RowTable*>(policy_smem + Traits::kWindowBytes +
                                                                    Traits::kPrefixBytes + Traits::kStateBytes);
  typename Traits::TiledMma mma;
  Policy policy;
  int row_of[Traits::kRows];  // this thread's rows of a score tile (CTA-relative)
  int32_t bias_rows[Traits::kRows] = {};
  {
    const CtaTile cta = resolve_cta(p);
    if (!cta.valid) return;
    policy.init(p, cta, policy_smem, policy_state, tid);

    const int64_t q_head_offset = cta.batch * p.q.batch_stride + cta.head * p.q.head_stride;
    load_rows_async<Traits, Traits::kBlockM>(
        smem_q, typename Traits::SmemLayoutQ{}, p.q.data,
        [&](int row) { return tile_row_start<Element>(p.q, q_head_offset, p.q_space, p.dilation, cta.q, row); },
        p.head_dim, tid);
    if (tid == 0) {
      const int64_t head_kv = cta.head / p.heads_per_kv;
      kv_head_offsets[0] = cta.batch * p.k.batch_stride + head_kv * p.k.head_stride;
      kv_head_offsets[1] = cta.batch * p.v.batch_stride + head_kv * p.v.head_stride;
    }
    commit_async_copies();

    // This thread's rows and columns of a score tile (CTA-relative), as the MMA partitions them.
    int col_of[Traits::kCols];
#pragma unroll
    for (int i = 0; i < Traits::kRows; ++i) row_of[i] = score_row<Traits>(tid, i);
#pragma unroll
    for (int j = 0; j < Traits::kCols; ++j) col_of[j] = score_col<Traits>(tid, j);
    if constexpr (Policy::kPositionalBias) {
      if (p.rpb.data != nullptr) {
#pragma unroll
        for (int i = 0; i < Traits::kRows; ++i) bias_rows[i] = bias_row_offset(p, cta, row_of[i]);
      }
    }
    policy.prepare_shared(p, cta, col_of, tid);
  }
  __syncthreads();  // publish the per-CTA state and mask tables

  Tensor acc_o = partition_fragment_C(mma, Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{});
  clear(acc_o);
  OnlineSoftmax<Traits::kRows> softmax;
  softmax.reset();
  const Mainloop mainloop{smem_q, smem_k, smem_v, row_tables, kv_head_offsets};
  mainloop(p, policy, row_of, bias_rows, acc_o, softmax, tid);

  wait_async_copies<0>();
  __syncthreads();  // Q buffer free for O (and landed, when no KV tile was visited)
  FmhaEpilogue<Traits>{}(p, resolve_cta(p), acc_o, softmax, row_of, smem_q, tid);
}

}  // namespace attnkit::cuda::fmha
