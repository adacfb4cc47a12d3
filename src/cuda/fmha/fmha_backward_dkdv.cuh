// The dK/dV kernel of the portable fused-attention backward (SM80+: mma.sync, ldmatrix, cp.async), one
// CTA per (KV tile, KV head, batch).
//
// Algorithm (FlashAttention-2 backward, KV-tile-centric, with the scores kept transposed so that no
// product needs a shared-memory round trip): the CTA loads its K and V tiles (BlockN keys) once, then
// for every query head of its GQA group and every Q tile its schedule lists (the Q tiles whose windows
// meet the KV tile, fmha_backward_tiles.cuh) it computes, with keys as rows:
//   S^T  = K Q^T                 P^T = exp2(S^T * scale*log2(e) - lse_log2)   (0 on masked elements)
//   dP^T = V dO^T                dS^T = P^T * (dP^T - delta)
//   dV  += P^T dO                dK  += dS^T Q
// P^T and dS^T go from accumulators straight into A operands; dO and Q are read transposed
// (ldmatrix.trans) as B operands. dK and dV stay in registers (fp32) across the whole group, so the GQA
// reduction over query heads is exact and needs no workspace; dK is scaled by the softmax scale at
// the end, both are stored through shared memory as whole 16-byte chunks. Loads are double-buffered:
// Q, dO, the row statistics (lse_log2, delta: two 16-byte-copied rows of the workspace) and, for
// partial box tiles, the query windows of visit i+1 are fetched while visit i computes.
// KV-parallel splitting (p.kv_splits > 1, fmha_backward_split.hpp): the CTA runs its split's part of the
// visits and stores its fp32 dK and dV unscaled to its workspace slab instead.
// Deterministic mode: no atomics, the result does not depend on scheduling (dQ is computed by
// fmha_backward_dq.cuh). Fast mode (p.accumulate_dq, a uniform runtime branch, so both modes share one
// instantiation): dS also goes through a shared tile (one more, after the double buffers) into
// dQ += dS K, added to the workspace's fp32 accumulator with atomics (fmha_backward_dq_accumulate.cuh; small
// problems: the CTA that finishes last converts it, fmha_backward_dq_convert.cuh).
// A neighborhood's positional bias (p.rpb, a uniform runtime branch) is added to S^T before the
// exponent, and with its gradient asked (p.grad_rpb) each visit's fp32 dS^T also goes through a shared
// tile (after the fast-mode region) into the CTA's partial sums per bias entry
// (fmha_backward_positional_bias.cuh).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_backward_dq_accumulate.cuh"
#include "cuda/fmha/fmha_backward_dq_convert.cuh"
#include "cuda/fmha/fmha_backward_gemm.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_positional_bias.cuh"
#include "cuda/fmha/fmha_backward_split.cuh"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_backward_visit.cuh"
#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Traits, template <int> class ScheduleTemplate, bool kLists>
__global__ void __launch_bounds__(Traits::kThreads, 2)
    fmha_backward_dkdv_kernel(const __grid_constant__ FmhaBackwardParams p) {
  using namespace cute;
  using Element = typename Traits::Element;
  using TiledMma = typename Traits::TiledMma;
  using Schedule = ScheduleTemplate<Traits::kBlockM>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kRows = Traits::template kRowsOf<kBlockN>;  // keys per thread
  constexpr int kCols = Traits::template kColsOf<kBlockM>;  // queries per thread

  extern __shared__ __align__(128) char smem[];
  Element* smem_k = reinterpret_cast<Element*>(smem);
  Element* smem_v = reinterpret_cast<Element*>(smem + Traits::kTileBytesKV);
  char* buffers = smem + 2 * Traits::kTileBytesKV;
  constexpr int kBufferBytes = 2 * Traits::kTileBytesQ + Traits::kRowStatBytes + Traits::kWindowBytes;
  auto q_buffer = [&](int b) { return reinterpret_cast<Element*>(buffers + b * kBufferBytes); };
  auto do_buffer = [&](int b) { return reinterpret_cast<Element*>(buffers + b * kBufferBytes + Traits::kTileBytesQ); };
  auto stat_buffer = [&](int b) {
    return reinterpret_cast<float*>(buffers + b * kBufferBytes + 2 * Traits::kTileBytesQ);
  };
  auto window_buffer = [&](int b) {
    return reinterpret_cast<int2*>(buffers + b * kBufferBytes + 2 * Traits::kTileBytesQ + Traits::kRowStatBytes);
  };
  // Fast mode only (the launch asks for Traits::kSmemBytesDkDvFast then): dS, queries as rows, and
  // two buffers of dQ accumulator row offsets (filled with the rest of a visit's loads).
  Element* smem_ds = reinterpret_cast<Element*>(smem + Traits::kSmemBytesDkDv);
  auto dq_row_buffer = [&](int b) {
    return reinterpret_cast<int64_t*>(smem + Traits::kSmemBytesDkDv + Traits::kTileBytesDs) + b * kBlockM;
  };
  // Positional-bias gradient only: the visit's fp32 dS^T, keys as rows (the launch asks for
  // Traits::kSmemBytesDkDvBias then).
  float* smem_ds32 = reinterpret_cast<float*>(smem + Traits::kSmemBytesDkDvFast);
  __shared__ typename Schedule::State schedule_state;

  const int tid = static_cast<int>(threadIdx.x);
  const KvSplitCta cta = kv_split_cta(p);
  const DecodedTile kv = decode_tile(p, cta.tile, p.kv_tiles, p.kv_space, p.q_space, false);
  const auto sync_cta = [] { __syncthreads(); };
  if (!kv.valid) {  // uniform over the CTA
    if (p.dq_done != nullptr) convert_dq_if_last_cta<Traits>(p, tid, Traits::kThreads, sync_cta);
    return;
  }
  const int32_t head_kv = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  issue_kv_tile_loads<Traits, kBlockN, typename Traits::SmemLayoutKV>(p, kv, batch, head_kv, smem_k, smem_v, tid);

  Schedule schedule;
  schedule.init(p, kv, batch, head_kv, &schedule_state, tid);
  __syncthreads();  // publish the schedule state
  const VisitRange range = split_visit_range(p, cta.split, schedule.count());
  const int count = range.count;

  // This thread's keys (rows) and queries (columns) of a BlockN x BlockM score tile.
  int row_of[kRows];
  int col_of[kCols];
#pragma unroll
  for (int i = 0; i < kRows; ++i) row_of[i] = accumulator_row<TiledMma, kBlockN, kBlockM>(tid, i);
#pragma unroll
  for (int j = 0; j < kCols; ++j) col_of[j] = accumulator_col<TiledMma, kBlockN, kBlockM>(tid, j);
  // Key index per dimension (box masks) or flat key token (list masks) of each of this thread's rows.
  int32_t key_index[kRows][kMaxDims];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) key_index[i][d] = kv.origin.index[d] + in_box(p.kv_space, d, row_of[i]);
  }
  int32_t bias_key[kRows] = {};  // key terms of the positional bias offsets (box masks with p.rpb)
  if constexpr (!kLists) {
    if (p.rpb.data != nullptr) {
#pragma unroll
      for (int i = 0; i < kRows; ++i)
        bias_key[i] = bias_key_term(p.rpb, p.dims, p.kv_space, kv.origin.index, row_of[i]);
    }
  }

  auto buffers_of = [&](int b) {
    return BackwardVisitBuffers<Element>{q_buffer(b), do_buffer(b), stat_buffer(b), window_buffer(b), dq_row_buffer(b)};
  };
  auto issue_visit = [&](const QVisit& v, int b) {
    issue_visit_loads<Traits, kLists, kBlockM, typename Traits::SmemLayoutQ>(p, kv, batch, v, buffers_of(b), tid);
  };

  Tensor acc_dk = partition_fragment_C(TiledMma{}, Shape<Int<kBlockN>, Int<Traits::kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(TiledMma{}, Shape<Int<kBlockN>, Int<Traits::kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});

  if (count > 0) issue_visit(schedule.visit(p, range.first), 0);
  for (int it = 0; it < count; ++it) {
    const int b = it & 1;
    const QVisit v = schedule.visit(p, range.first + it);
    wait_async_copies<0>();
    __syncthreads();  // visit it's tiles (and K, V) landed; every warp is done with buffer b ^ 1
    if (it + 1 < count) issue_visit(schedule.visit(p, range.first + it + 1), b ^ 1);

    Tensor sQ = make_tensor(make_smem_ptr(q_buffer(b)), typename Traits::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(do_buffer(b)), typename Traits::SmemLayoutQ{});
    Tensor sQt = make_tensor(make_smem_ptr(q_buffer(b)), typename Traits::SmemLayoutQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(do_buffer(b)), typename Traits::SmemLayoutQt{});
    const float* stats = stat_buffer(b);

    Tensor acc_s = partition_fragment_C(TiledMma{}, Shape<Int<kBlockN>, Int<kBlockM>>{});
    clear(acc_s);
    gemm_smem_smem<TiledMma, typename Traits::SmemCopyAtom, typename Traits::SmemCopyAtom>(acc_s, sK, sQ, tid);

    uint32_t allowed[kRows];  // bit j: column j of row i is attended
    visit_allowed_bits<kLists, kBlockM>(p, batch, v, key_index, col_of, window_buffer(b), allowed);
    // P^T in place, then packed into the A operand of dV += P^T dO. The packed (fp16/bf16) P also
    // serves dS below, which keeps only one fp32 score tile alive at a time.
    bool biased = false;
    if constexpr (!kLists) biased = p.rpb.data != nullptr;
    if (biased) {
      int32_t bias_query[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        bias_query[j] = bias_query_term(p.rpb, p.dims, p.q_space, v.origin.index, v.head, col_of[j]);
      }
      scores_to_probabilities_with_bias(as_rows_cols(acc_s), allowed, stats, col_of, p, bias_key, bias_query);
    } else {
      scores_to_probabilities(as_rows_cols(acc_s), allowed, stats, col_of, p.scale_log2);
    }
    Tensor prob = make_tensor<Element>(partition_shape_A(TiledMma{}, Shape<Int<kBlockN>, Int<kBlockM>>{}));
    convert_scores_to_operand<Element>(acc_s, prob);
    gemm_registers_smem<TiledMma, typename Traits::SmemCopyAtomTransposed>(acc_dv, prob, sdOt, tid);

    Tensor acc_dp = partition_fragment_C(TiledMma{}, Shape<Int<kBlockN>, Int<kBlockM>>{});
    clear(acc_dp);
    gemm_smem_smem<TiledMma, typename Traits::SmemCopyAtom, typename Traits::SmemCopyAtom>(acc_dp, sV, sdO, tid);
    Tensor dp = as_rows_cols(acc_dp);
    constexpr int kBlocksM = decltype(size<1>(acc_dp))::value;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float delta = stats[kBlockM + col_of[j]];
#pragma unroll
      for (int i = 0; i < kRows; ++i) dp(i, j) = operand_value<Element, kBlocksM>(prob, i, j) * (dp(i, j) - delta);
    }
    const bool bias_gradient = biased && p.grad_rpb.data != nullptr;
    if (bias_gradient) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
#pragma unroll
        for (int i = 0; i < kRows; ++i) smem_ds32[row_of[i] * kBlockM + col_of[j]] = dp(i, j);
      }
    }
    convert_scores_to_operand<Element>(acc_dp, prob);
    if (p.accumulate_dq) store_ds_transposed<Traits, kBlocksM>(smem_ds, prob, row_of, col_of);
    gemm_registers_smem<TiledMma, typename Traits::SmemCopyAtomTransposed>(acc_dk, prob, sQt, tid);
    if (p.accumulate_dq) {
      __syncthreads();  // dS of every warp's keys is in shared memory (the next visit's barrier frees it)
      accumulate_dq_partial<Traits>(p, smem_ds, smem_k, dq_row_buffer(b), kLists ? tid : opaque_thread_index());
    }
    if (bias_gradient) {
      __syncthreads();  // every warp's dS^T is in smem_ds32 (the next visit's barrier frees it)
      accumulate_bias_gradient<kBlockM, Traits::kThreads>(p, smem_ds32, kv.origin.index, v.origin.index,
                                                          bias_partial_row(p, cta.split, batch, v.head, cta.tile), tid);
    }
  }

  wait_async_copies<0>();
  __syncthreads();        // K and V buffers free for the output (and landed, when nothing was visited)
  if (p.kv_splits > 1) {  // this split's unscaled partials; the reduce kernel sums and writes them
    const int64_t slab = kv_partial_offset(p, cta.split, batch, head_kv, cta.tile, kBlockN);
    auto thread_mma = TiledMma{}.get_thread_slice(tid);
    store_partial_tile<kBlockN, Traits::kHeadDim>(thread_mma, acc_dk, p.dk_partial + slab);
    store_partial_tile<kBlockN, Traits::kHeadDim>(thread_mma, acc_dv, p.dv_partial + slab);
    if (p.dq_done != nullptr) convert_dq_if_last_cta<Traits>(p, tid, Traits::kThreads, sync_cta);
    return;
  }
#pragma unroll
  for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= p.scale;
  const int64_t dk_head = batch * p.d_k.batch_stride + head_kv * p.d_k.head_stride;
  const int64_t dv_head = batch * p.d_v.batch_stride + head_kv * p.d_v.head_stride;
  store_tile<Traits, kBlockN>(
      acc_dk, smem_k, typename Traits::SmemLayoutKV{},
      [&](int row) { return tile_row_output<Element>(p.d_k, dk_head, p.kv_space, p.dilation, kv.origin, row); },
      p.head_dim, tid);
  store_tile<Traits, kBlockN>(
      acc_dv, smem_v, typename Traits::SmemLayoutKV{},
      [&](int row) { return tile_row_output<Element>(p.d_v, dv_head, p.kv_space, p.dilation, kv.origin, row); },
      p.head_dim_v, tid);
  if (p.dq_done != nullptr) convert_dq_if_last_cta<Traits>(p, tid, Traits::kThreads, sync_cta);
}

}  // namespace attnkit::cuda::fmha
