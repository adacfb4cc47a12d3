// The dK/dV kernel of the Hopper fused-attention backward (SM90a: wgmma), one CTA per (KV tile of 128
// keys, KV head, batch) — the portable dK/dV kernel's grid, visit schedules, masks and workspace.
//
// Algorithm (FlashAttention-2 backward, KV-tile-centric, scores kept transposed): the CTA loads K and V
// once; warpgroup w owns keys 64w .. 64w + 63. For every visit (a Q tile of 64 queries of one query
// head, fmha_backward_tiles.cuh) each warpgroup computes, keys as rows:
//   S^T = K Q^T                               wgmma, both operands in shared memory
//   P^T = exp2(S^T * scale*log2(e) - lse_log2) (0 where masked)
//   dP^T = V dO^T,  dV += P^T dO              one batch (P^T packed into A registers)
//   dS^T = P^T * (dP^T - delta),  dK += dS^T Q
// so that one fp32 score tile at a time lives next to dK and dV; dS^T goes query-major into shared
// memory and dQ = dS K (wgmma, Sm90BackwardTraits::MmaDq) is issued with the next visit's S^T; fast
// mode (p.accumulate_dq) adds it into the workspace's fp32 accumulator with red.global.add.v2.f32,
// the deterministic mode discards it (the separate dQ kernel computes dQ; a wgmma under the mode's
// condition would be serialised by ptxas). dK and dV stay in registers over the whole GQA group and
// go out through shared memory as whole 16-byte chunks (dK times the softmax scale). Q, dO and the
// visit's row statistics, windows and dQ row offsets are double-buffered cp.async gathers
// (fmha_backward_visit.cuh); one CTA barrier per visit publishes them (fenced for the async proxy)
// with the visit's dS. On other architectures the body is empty (the registry never selects it).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha/fmha_backward_dq_accumulate.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_backward_visit.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"

namespace attnkit::cuda::fmha_sm90 {

template <class Traits, template <int> class ScheduleTemplate, bool kLists>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    fmha_sm90_backward_dkdv_kernel(const __grid_constant__ fmha::FmhaBackwardParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using namespace fmha;
  using Element = typename Traits::Element;
  using Storage = typename Traits::SharedStorage;
  using Schedule = ScheduleTemplate<Traits::kBlockM>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kKeys = Traits::kKeysPerGroup;

  extern __shared__ char smem_raw[];
  Storage& ss = *reinterpret_cast<Storage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  __shared__ typename Schedule::State schedule_state;

  const int tid = static_cast<int>(threadIdx.x);
  const int wg_tid = tid % 128;
  // Broadcast from lane 0 so that the compiler sees it warp-uniform (wgmma in a branch it thinks
  // divergent is serialised).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  // The KV tile's description is read again per visit (windows) and at the end (stores): kept in shared
  // memory, not in registers across the visit loop.
  __shared__ DecodedTile kv_shared;
  {
    const DecodedTile kv = decode_tile(p, static_cast<int32_t>(blockIdx.x), p.kv_tiles, p.kv_space, p.q_space, false);
    if (!kv.valid) return;
    if (tid == 0) kv_shared = kv;
  }
  const DecodedTile& kv = kv_shared;
  __syncthreads();
  const int32_t head_kv = static_cast<int32_t>(blockIdx.y);
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  issue_kv_tile_loads<Traits, kBlockN, typename Traits::SmemLayoutKV>(p, kv, batch, head_kv, ss.k, ss.v, tid);

  Schedule schedule;
  schedule.init(p, kv, head_kv, &schedule_state, tid);
  __syncthreads();  // publish the schedule state
  const int count = schedule.count();

  typename Traits::MmaScores mma_s;
  typename Traits::MmaGrads mma_g;
  typename Traits::MmaDq mma_q;
  auto thread_s = mma_s.get_thread_slice(wg_tid);
  auto thread_g = mma_g.get_thread_slice(wg_tid);
  auto thread_q = mma_q.get_thread_slice(wg_tid);

  // This thread's keys (rows, within the warpgroup's 64) and queries (columns) of the score tiles.
  constexpr int kRows = 2;
  constexpr int kCols = 2 * (kBlockM / 8);
  // A wgmma m64nN accumulator: warp w of the warpgroup holds rows 16w + lane / 4 (+ 8), columns
  // 8j + 2 (lane % 4) (+ 1) — closed forms, so that column offsets fold into immediates.
  const auto origin = gmma_accumulator_coord<typename Traits::MmaScores, kKeys, kBlockM>(wg_tid, 0, 0);
  const int row0 = group * kKeys + static_cast<int>(get<0>(origin));
  const int col0 = static_cast<int>(get<1>(origin));
  int col_of[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) col_of[j] = col0 + 8 * (j / 2) + j % 2;
  int32_t key_index[kRows][kMaxDims];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + 8 * i;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) key_index[i][d] = kv.origin.index[d] + in_box(p.kv_space, d, row);
  }

  auto buffers_of = [&](int b) {
    return BackwardVisitBuffers<Element>{ss.q[b], ss.d_o[b], ss.stats[b], ss.windows[b], ss.dq_rows[b]};
  };
  auto issue_visit = [&](const QVisit& v, int b) {
    issue_visit_loads<Traits, kLists, kBlockM, typename Traits::SmemLayoutQ>(p, kv, batch, v, buffers_of(b), tid);
  };

  Tensor sK = make_tensor(make_smem_ptr(ss.k), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v), typename Traits::SmemLayoutKV{});
  constexpr int kDqDepth = Traits::kDqDepth;
  constexpr int kDqColumns = Traits::kDqColumns;
  // The dQ product's operands: this warpgroup's head-dim columns (kDqSplitsHeadDim) or keys.
  const int dq_key_block = Traits::kDqSplitsHeadDim ? 0 : group;
  auto fixed_tile = [](auto* pointer, auto layout) { return make_tensor(make_smem_ptr(pointer), layout); };

  Tensor acc_dk = partition_fragment_C(mma_g, Shape<Int<kKeys>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma_g, Shape<Int<kKeys>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor tGrP = make_tensor<Element>(partition_shape_A(mma_g, Shape<Int<kKeys>, Int<kBlockM>>{}));
  Tensor tGrDs = make_tensor<Element>(partition_shape_A(mma_g, Shape<Int<kKeys>, Int<kBlockM>>{}));

  // Q-side operands of buffer `buf` and the K / V slices of this warpgroup (descriptors are rebuilt
  // where used, not kept alive across the loop).
  auto q_tile = [&](int buf, auto layout) { return make_tensor(make_smem_ptr(ss.q[buf]), layout); };
  auto do_tile = [&](int buf, auto layout) { return make_tensor(make_smem_ptr(ss.d_o[buf]), layout); };
  auto key_slice = [&](Element* tile) {
    return local_tile(fixed_tile(tile, typename Traits::SmemLayoutKV{}), Shape<Int<kKeys>, Int<kHeadDim>>{},
                      make_coord(group, 0));
  };
  Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kKeys>, Int<kBlockM>>{});
  // S^T of the Q tile in buffer `buf`, as one committed batch.
  auto issue_scores = [&](int buf) {
    Tensor tSrK = thread_s.partition_fragment_A(key_slice(ss.k));
    Tensor tSrQ = thread_s.partition_fragment_B(q_tile(buf, typename Traits::SmemLayoutQ{}));
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    issue_gemm<false>(mma_s, tSrK, tSrQ, acc_s);
    warpgroup_commit_batch();
  };

  // Software pipeline over the visits: S^T(it + 1) is issued with dQ(it), so the tensor cores have work
  // while the dQ atomics run (measured: no gain over issuing it at the next visit's start, docs/perf.md,
  // but one barrier fewer). One CTA barrier per visit publishes dS(it)
  // (double-buffered by visit parity), the loads of visit it + 1, and frees buffer it % 2 for the
  // loads of visit it + 2.
  if (count > 0) issue_visit(schedule.visit(p, 0), 0);
  wait_async_copies<0>();
  fence_generic_to_async_shared();
  __syncthreads();  // K, V and visit 0 landed
  if (count > 1) issue_visit(schedule.visit(p, 1), 1);
  // The mask bits of a visit (count > 0), computed while its S^T runs; past the last visit they are
  // computed for the last one again, and unused.
  uint32_t allowed[kRows];  // bit j: column j of row i is attended
  auto visit_bits = [&](int i) {
    visit_allowed_bits<kLists, kBlockM>(p, batch, schedule.visit(p, i < count ? i : count - 1), key_index, col_of,
                                        ss.windows[i & 1], allowed);
  };
  if (count > 0) visit_bits(0);
  issue_scores(0);  // unconditionally (no wgmma under a condition): unused when nothing is visited
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_s);

  for (int it = 0; it < count; ++it) {
    const int b = it & 1;
    const float* stats = ss.stats[b];
    scores_to_probabilities(gmma_rows_cols(acc_s), allowed, stats, col_of, p.scale_log2);
    pack_accumulator<Element>(acc_s, tGrP);

    // dP^T and dV += P^T dO, then dS^T and dK += dS^T Q: one fp32 score tile at a time next to dK and
    // dV (two spill: 128 + 64 + operands > 255 registers).
    Tensor tSrV = thread_s.partition_fragment_A(key_slice(ss.v));
    Tensor tSrdO = thread_s.partition_fragment_B(do_tile(b, typename Traits::SmemLayoutQ{}));
    Tensor tGrdOt = thread_g.partition_fragment_B(do_tile(b, typename Traits::SmemLayoutQt{}));
    Tensor tGrQt = thread_g.partition_fragment_B(q_tile(b, typename Traits::SmemLayoutQt{}));
    Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<kKeys>, Int<kBlockM>>{});
    warpgroup_fence_operand(acc_dp);
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(tGrP);
    warpgroup_arrive();
    issue_gemm<false>(mma_s, tSrV, tSrdO, acc_dp);
    warpgroup_commit_batch();
    issue_gemm<true>(mma_g, tGrP, tGrdOt, acc_dv);
    warpgroup_commit_batch();
    warpgroup_wait<1>();  // dP^T done; dV may still run
    warpgroup_fence_operand(acc_dp);
    {
      Tensor dp = gmma_rows_cols(acc_dp);
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float delta = stats[kBlockM + col_of[j]];
#pragma unroll
        for (int i = 0; i < kRows; ++i) dp(i, j) = packed_value<Element>(tGrP, i, j) * (dp(i, j) - delta);
      }
    }
    pack_accumulator<Element>(acc_dp, tGrDs);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(tGrDs);
    warpgroup_arrive();
    issue_gemm<true>(mma_g, tGrDs, tGrQt, acc_dk);
    warpgroup_commit_batch();

    // dS^T (keys as rows) -> dS query-major: word w of the packed fragment holds columns
    // col_of[2 (w / 2)] and + 1 of row w % 2, adjacent queries, so one 32-bit store each. Also in
    // deterministic mode: the dQ product below runs in both modes (a wgmma under the mode's condition
    // is serialised by ptxas), only fast mode adds its result.
    {
      Tensor sDs = fixed_tile(ss.ds[b], typename Traits::SmemLayoutDs{});
      const uint32_t* words = reinterpret_cast<const uint32_t*>(raw_pointer_cast(tGrDs.data()));
#pragma unroll
      for (int w = 0; w < kCols; ++w) {
        const int key = row0 + 8 * (w % 2);
        *reinterpret_cast<uint32_t*>(&sDs(col_of[2 * (w / 2)], key)) = words[w];
      }
    }
    int64_t dq_row_base[2] = {-1, -1};  // dq_accum offsets of this thread's dQ rows (row0 - 64 group (+ 8))
    if (p.accumulate_dq) {
      // Read now: the loads of visit it + 2 overwrite them after the barrier.
#pragma unroll
      for (int i = 0; i < 2; ++i) dq_row_base[i] = ss.dq_rows[b][row0 - group * kKeys + 8 * i];
    }
    wait_async_copies<0>();           // visit it + 1 landed (this thread's copies)
    fence_generic_to_async_shared();  // ... and dS, for the wgmma reads
    warpgroup_wait<0>();              // dV and dK read buffer b for the last time
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(tGrP);
    warpgroup_fence_operand(tGrDs);
    __syncthreads();
    if (it + 2 < count) issue_visit(schedule.visit(p, it + 2), b);

    // dQ(it) = dS K, then S^T(it + 1) — issued after the last visit too, unused then: no wgmma sits
    // under a condition (ptxas would serialise them).
    const int dq_col_block = Traits::kDqSplitsHeadDim ? group : 0;
    Tensor acc_dq = partition_fragment_C(mma_q, Shape<Int<kBlockM>, Int<kDqColumns>>{});
    {
      Tensor tQrDs =
          thread_q.partition_fragment_A(local_tile(fixed_tile(ss.ds[b], typename Traits::SmemLayoutDs{}),
                                                   Shape<Int<kBlockM>, Int<kDqDepth>>{}, make_coord(0, dq_key_block)));
      Tensor tQrKt = thread_q.partition_fragment_B(local_tile(fixed_tile(ss.k, typename Traits::SmemLayoutKt{}),
                                                              Shape<Int<kDqColumns>, Int<kDqDepth>>{},
                                                              make_coord(dq_col_block, dq_key_block)));
      warpgroup_fence_operand(acc_dq);
      warpgroup_arrive();
      issue_gemm<false>(mma_q, tQrDs, tQrKt, acc_dq);
      warpgroup_commit_batch();
    }
    issue_scores(b ^ 1);
    visit_bits(it + 1);
    warpgroup_wait<1>();  // dQ(it); S^T(it + 1) runs on
    warpgroup_fence_operand(acc_dq);
    {
      // Predicated reductions, no branches: S^T(it + 1) is in flight, and a branch here makes ptxas
      // serialise the wgmmas. The same accumulator map: query rows row0 - 64 group (+ 8), columns
      // col0 + 8 (j / 2). Rows past the extents have offset -1 (and deterministic mode all rows).
      Tensor dq = gmma_rows_cols(acc_dq);
      float* accum = static_cast<float*>(p.dq_accum.data);
#pragma unroll
      for (int i = 0; i < size<0>(dq); ++i) {
#pragma unroll
        for (int j = 0; j < size<1>(dq); j += 2) {
          const int col = dq_col_block * kDqColumns + col0 + 8 * (j / 2);
          reduce_add_pair_if(dq_row_base[i] >= 0 && col < p.head_dim, accum + dq_row_base[i] + col, dq(i, j),
                             dq(i, j + 1));
        }
      }
    }
    // S^T(it + 1) is waited for here, not across the loop's back edge (ptxas would serialise the wgmmas).
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_s);
  }

  wait_async_copies<0>();
  __syncthreads();  // every product has read K and V: their buffers take the outputs
#pragma unroll
  for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= p.scale;
  {
    Tensor dk = gmma_rows_cols(acc_dk);
    Tensor dv = gmma_rows_cols(acc_dv);
#pragma unroll
    for (int i = 0; i < size<0>(dk); ++i) {
      const int row = row0 + 8 * i;
#pragma unroll
      for (int j = 0; j < size<1>(dk); j += 2) {
        const int col = col0 + 8 * (j / 2);
        *reinterpret_cast<uint32_t*>(&sK(row, col)) = pack_pair<Element>(dk(i, j), dk(i, j + 1));
        *reinterpret_cast<uint32_t*>(&sV(row, col)) = pack_pair<Element>(dv(i, j), dv(i, j + 1));
      }
    }
  }
  __syncthreads();
  const int64_t dk_head = batch * p.d_k.batch_stride + head_kv * p.d_k.head_stride;
  const int64_t dv_head = batch * p.d_v.batch_stride + head_kv * p.d_v.head_stride;
  const int col = (tid % Traits::kChunksPerRow) * 8;
#pragma unroll
  for (int pass = 0; pass < kBlockN / Traits::kRowsPerPass; ++pass) {
    const int row = tid / Traits::kChunksPerRow + pass * Traits::kRowsPerPass;
    if (col < p.head_dim) {
      Element* out = tile_row_output<Element>(p.d_k, dk_head, p.kv_space, p.dilation, kv.origin, row);
      if (out != nullptr) *reinterpret_cast<uint4*>(out + col) = *reinterpret_cast<const uint4*>(&sK(row, col));
    }
    if (col < p.head_dim_v) {
      Element* out = tile_row_output<Element>(p.d_v, dv_head, p.kv_space, p.dilation, kv.origin, row);
      if (out != nullptr) *reinterpret_cast<uint4*>(out + col) = *reinterpret_cast<const uint4*>(&sV(row, col));
    }
  }
#endif
}

}  // namespace attnkit::cuda::fmha_sm90
