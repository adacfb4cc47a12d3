// The dQ kernel of the portable fused-attention backward, one CTA per (Q tile, query head, batch).
//
// Algorithm: Q-tile-centric like the forward. The CTA loads its Q and dO tiles (BlockM queries) once and
// the row statistics of its rows into registers, then walks the KV tiles its schedule lists (the
// forward's visit order: the box of tiles meeting the windows, or the tile list of a block / element
// mask) and recomputes, with queries as rows,
//   S  = Q K^T      P  = exp2(S * scale*log2(e) - lse_log2)   (0 on masked elements)
//   dP = dO V^T     dS = P * (dP - delta)                      dQ += dS K
// dS goes from the accumulator straight into the A operand; K is read transposed (ldmatrix.trans) as the
// B operand. K and V tiles are double-buffered (tile j+1 loads while tile j computes). dQ is scaled and
// stored once at the end: no atomics, so the result is bit-identical from run to run. This is the
// deterministic mode's dQ; against the fast mode's, accumulated with atomics inside the dK/dV kernel
// (fmha_backward_dq_accumulate.cuh), it costs the recomputation of S and dP: 7 instead of 5 tile
// products per (Q tile, KV tile) pair.
// CTAs run heaviest-first (reversed tile order: under a causal mask the last Q tiles see the most keys).
// A neighborhood's positional bias (p.rpb, a uniform runtime branch) is added to S before the exponent
// (fmha_backward_positional_bias.cuh).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_backward_gemm.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_positional_bias.cuh"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"

namespace attnkit::cuda::fmha {

template <class Traits, template <int> class ScheduleTemplate, bool kLists>
__global__ void __launch_bounds__(Traits::kThreads, 2)
    fmha_backward_dq_kernel(const __grid_constant__ FmhaBackwardParams p) {
  using namespace cute;
  using Element = typename Traits::Element;
  using TiledMma = typename Traits::TiledMma;
  using Schedule = ScheduleTemplate<Traits::kBlockN>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kRows = Traits::template kRowsOf<kBlockM>;  // queries per thread
  constexpr int kCols = Traits::template kColsOf<kBlockN>;  // keys per thread

  extern __shared__ __align__(128) char smem[];
  Element* smem_q = reinterpret_cast<Element*>(smem);
  Element* smem_do = reinterpret_cast<Element*>(smem + Traits::kTileBytesQ);
  auto k_buffer = [&](int b) {
    return reinterpret_cast<Element*>(smem + 2 * Traits::kTileBytesQ + 2 * b * Traits::kTileBytesKV);
  };
  auto v_buffer = [&](int b) {
    return reinterpret_cast<Element*>(smem + 2 * Traits::kTileBytesQ + (2 * b + 1) * Traits::kTileBytesKV);
  };
  __shared__ typename Schedule::State schedule_state;

  const int tid = static_cast<int>(threadIdx.x);
  const int32_t q_linear = p.total_q_tiles - 1 - static_cast<int32_t>(blockIdx.x);
  const DecodedTile q = decode_tile(p, q_linear, p.q_tiles, p.q_space, p.kv_space, true);
  if (!q.valid) return;
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head_kv = head / p.heads_per_kv;
  const int64_t q_head = batch * p.q.batch_stride + head * p.q.head_stride;
  const int64_t do_head = batch * p.d_o.batch_stride + head * p.d_o.head_stride;
  const int64_t k_head = batch * p.k.batch_stride + head_kv * p.k.head_stride;
  const int64_t v_head = batch * p.v.batch_stride + head_kv * p.v.head_stride;

  load_rows_async<Traits, kBlockM>(
      smem_q, typename Traits::SmemLayoutQ{}, p.q.data,
      [&](int row) { return tile_row_start<Element>(p.q, q_head, p.q_space, p.dilation, q.origin, row); }, p.head_dim,
      tid);
  load_rows_async<Traits, kBlockM>(
      smem_do, typename Traits::SmemLayoutQ{}, p.d_o.data,
      [&](int row) { return tile_row_start<Element>(p.d_o, do_head, p.q_space, p.dilation, q.origin, row); },
      p.head_dim_v, tid);
  commit_async_copies();

  Schedule schedule;
  schedule.init(p, q, head, &schedule_state, tid);

  int row_of[kRows];
  int col_of[kCols];
#pragma unroll
  for (int i = 0; i < kRows; ++i) row_of[i] = accumulator_row<TiledMma, kBlockM, kBlockN>(tid, i);
#pragma unroll
  for (int j = 0; j < kCols; ++j) col_of[j] = accumulator_col<TiledMma, kBlockM, kBlockN>(tid, j);
  float lse[kRows];
  float delta[kRows];
  {
    const int64_t base = ((static_cast<int64_t>(batch) * p.heads_q + head) * p.total_q_tiles + q_linear) * kBlockM;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      lse[i] = p.lse_log2[base + row_of[i]];
      delta[i] = p.delta[base + row_of[i]];
    }
  }
  // Box masks: each of this thread's queries' window per dimension. List masks: its flat query tokens.
  int2 window[kRows][kMaxDims];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      const int32_t index = q.origin.index[d] + in_box(p.q_space, d, row_of[i]);
      window[i][d] = make_int2(index, index);
      if constexpr (!kLists) {
        if (d < p.dims && index < q.n_q[d]) {
          const detail::IndexRange w = window_of(p.rule[d], index, q.n_kv[d]);
          window[i][d] = make_int2(static_cast<int>(w.begin), static_cast<int>(w.end));
        }
      }
    }
  }
  bool biased = false;
  int32_t bias_query[kRows] = {};  // query terms of the positional bias offsets
  if constexpr (!kLists) {
    biased = p.rpb.data != nullptr;
    if (biased) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        bias_query[i] = bias_query_term(p.rpb, p.dims, p.q_space, q.origin.index, head, row_of[i]);
      }
    }
  }
  __syncthreads();  // publish the schedule state
  const int count = schedule.count();

  auto issue_visit = [&](const KvVisit& v, int b) {
    load_rows_async<Traits, kBlockN>(
        k_buffer(b), typename Traits::SmemLayoutKV{}, p.k.data,
        [&](int row) { return tile_row_start<Element>(p.k, k_head, p.kv_space, p.dilation, v.origin, row); },
        p.head_dim, tid);
    load_rows_async<Traits, kBlockN>(
        v_buffer(b), typename Traits::SmemLayoutKV{}, p.v.data,
        [&](int row) { return tile_row_start<Element>(p.v, v_head, p.kv_space, p.dilation, v.origin, row); },
        p.head_dim_v, tid);
    commit_async_copies();
  };

  Tensor acc_dq = partition_fragment_C(TiledMma{}, Shape<Int<kBlockM>, Int<Traits::kHeadDim>>{});
  clear(acc_dq);
  Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQ{});
  const int64_t mask_base = kLists ? list_mask_base(p.list, batch, head) : 0;

  if (count > 0) issue_visit(schedule.visit(p, 0), 0);
  for (int it = 0; it < count; ++it) {
    const int b = it & 1;
    const KvVisit v = schedule.visit(p, it);
    wait_async_copies<0>();
    __syncthreads();  // K(it), V(it) (and Q, dO) landed; every warp is done with buffer b ^ 1
    if (it + 1 < count) issue_visit(schedule.visit(p, it + 1), b ^ 1);

    Tensor sK = make_tensor(make_smem_ptr(k_buffer(b)), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(v_buffer(b)), typename Traits::SmemLayoutKV{});
    Tensor sKt = make_tensor(make_smem_ptr(k_buffer(b)), typename Traits::SmemLayoutKVt{});

    Tensor acc_s = partition_fragment_C(TiledMma{}, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_s);
    gemm_smem_smem<TiledMma, typename Traits::SmemCopyAtom, typename Traits::SmemCopyAtom>(acc_s, sQ, sK, tid);

    uint32_t allowed[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) allowed[i] = ~0u;
    if (!v.full) {
      if constexpr (kLists) {
        const int32_t seq_q = p.q_space.flat_extent;
        const int32_t seq_k = p.kv_space.flat_extent;
        const int32_t q0 = q.origin.index[0];
        if (p.list.key_bits != nullptr && q0 % 32 == 0) {
          // Element masks: per key column, the key-major words of this Q tile's queries.
          static_assert(kBlockM % 32 == 0, "a Q tile spans whole words of the key-major bits");
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            const int32_t k = v.origin.index[0] + col_of[j];
            uint32_t words[kBlockM / 32] = {};
            if (k < seq_k) load_key_bit_words(p.list, seq_k, batch, head, k, q0, words);
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
              if (!key_bit(words, window[i][0].x - q0)) allowed[i] &= ~(1u << j);
            }
          }
        } else {
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            const int32_t k = v.origin.index[0] + col_of[j];
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
              const int32_t qi = window[i][0].x;  // flat query token
              const bool ok = qi < seq_q && k < seq_k && list_mask_allows(p.list, mask_base, qi, k);
              if (!ok) allowed[i] &= ~(1u << j);
            }
          }
        }
      } else {
#pragma unroll
        for (int d = 0; d < kMaxDims; ++d) {
          if (d < p.dims) {
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
              const int32_t key = v.origin.index[d] + in_box(p.kv_space, d, col_of[j]);
#pragma unroll
              for (int i = 0; i < kRows; ++i) {
                if (key < window[i][d].x || key >= window[i][d].y) allowed[i] &= ~(1u << j);
              }
            }
          }
        }
      }
    }
    // P in place, packed to fp16/bf16 (the dS computation reads it back from there, so only one fp32
    // score tile is alive at a time).
    Tensor s = as_rows_cols(acc_s);
    if (biased) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int32_t key = bias_key_term(p.rpb, p.dims, p.kv_space, v.origin.index, col_of[j]);
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          s(i, j) = (allowed[i] >> j) & 1u
                        ? fast_exp2(fmaf(s(i, j), p.scale_log2,
                                         fmaf(load_bias(p.rpb, bias_query[i] + key), kBiasLog2e, -lse[i])))
                        : 0.f;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          s(i, j) = (allowed[i] >> j) & 1u ? fast_exp2(fmaf(s(i, j), p.scale_log2, -lse[i])) : 0.f;
        }
      }
    }
    Tensor operand = make_tensor<Element>(partition_shape_A(TiledMma{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    convert_scores_to_operand<Element>(acc_s, operand);

    Tensor acc_dp = partition_fragment_C(TiledMma{}, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc_dp);
    gemm_smem_smem<TiledMma, typename Traits::SmemCopyAtom, typename Traits::SmemCopyAtom>(acc_dp, sdO, sV, tid);
    Tensor dp = as_rows_cols(acc_dp);
    constexpr int kBlocksM = decltype(size<1>(acc_dp))::value;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int j = 0; j < kCols; ++j)
        dp(i, j) = operand_value<Element, kBlocksM>(operand, i, j) * (dp(i, j) - delta[i]);
    }
    convert_scores_to_operand<Element>(acc_dp, operand);
    gemm_registers_smem<TiledMma, typename Traits::SmemCopyAtomTransposed>(acc_dq, operand, sKt, tid);
  }

  wait_async_copies<0>();
  __syncthreads();  // the Q buffer is free for the output (and landed, when nothing was visited)
#pragma unroll
  for (int i = 0; i < size(acc_dq); ++i) acc_dq(i) *= p.scale;
  const int64_t dq_head = batch * p.d_q.batch_stride + head * p.d_q.head_stride;
  store_tile<Traits, kBlockM>(
      acc_dq, smem_q, typename Traits::SmemLayoutQ{},
      [&](int row) { return tile_row_output<Element>(p.d_q, dq_head, p.q_space, p.dilation, q.origin, row); },
      p.head_dim, tid);
}

}  // namespace attnkit::cuda::fmha
