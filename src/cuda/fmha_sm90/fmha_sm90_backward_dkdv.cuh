// The dK/dV kernel of the Hopper fused-attention backward (SM90a: wgmma, mbarriers, warp
// specialisation), one CTA per (KV tile of 128 keys, KV head, batch) — or kv_splits CTAs, each over a part
// of the tile's visits, writing fp32 partials (fmha_backward_split.hpp) — the portable dK/dV kernel's
// grid, visit schedules, masks and workspace.
//
// Algorithm (FlashAttention-2 backward, KV-tile-centric, scores kept transposed): warpgroup 0 produces
// (fmha_sm90_backward_producer.cuh: K and V once, then every visit's Q, dO and row data into two stages,
// announced through mbarriers) and gives its registers to the two MMA warpgroups; MMA warpgroup w owns
// keys 64w .. 64w + 63. For every visit (a Q tile of 64 queries of one query head,
// fmha_backward_tiles.cuh) each MMA warpgroup computes, keys as rows:
//   S^T = K Q^T,  dP^T = V dO^T               two wgmma batches, operands in shared memory
//   P^T = exp2(S^T * scale*log2(e) - lse_log2) (0 where masked), once S^T is done
//   dV += P^T dO                              P^T packed into A registers; runs while dS^T is formed
//   dS^T = P^T * (dP^T - delta),  dK += dS^T Q
// so that one fp32 score tile at a time lives next to dK and dV. In fast mode (p.accumulate_dq) the
// warpgroup stores dS^T query-major into its own shared tile and computes its partial dQ = dS K over
// its 64 keys (wgmma, Sm90BackwardTraits::MmaDq). With a TMA map of the workspace's accumulator
// (Sm90DqMap) it stores the partial as fp32 boxes of 32 columns (128-byte swizzled) into its dQ buffer
// and one thread adds each box with a TMA reduction (cp.reduce.async.bulk.tensor .add; the buffer is
// rewritten once those reads have completed, which the thread checks before the warpgroup's next dS
// barrier); without one (dilation, flat decomposed tokens, odd D) every thread adds its accumulator
// pairs with red.global; in small problems the CTA that finishes last then converts the whole accumulator
// into dQ (p.dq_done, fmha_backward_dq_convert.cuh). Over a head's visits the two MMA warpgroups never wait for each
// other (only the producer's stages couple them; they meet in the epilogue), so one's tensor-core work can run while
// the other computes probabilities. The deterministic mode (p.ordered_dq) adds the same partials in a fixed order: the
// thread that adds a warpgroup's partial first waits for the warpgroup's turn on the Q tile (fmha_sm90_dq_turns.cuh;
// the visit's rank read from tables while the score products run), and passes the turn on once the reductions have
// completed — checked after the next visit's score products are issued, so that the wait overlaps them; a partial visit
// the warpgroup skips still takes and passes its turn. dK and dV stay in registers over the whole GQA group and go out
// through shared memory as whole 16-byte chunks (dK times the softmax scale) to rows whose starts the MMA threads
// compute once each. K and V load while one MMA warp computes the visit schedule (four binary searches per dimension,
// one per lane) and the others the tables from which partial box visits take their element masks
// (fmha_sm90_backward_mask.cuh). With p.heads_per_cta > 1 (box policies in fast mode up to D 64: one box mask serves
// every head) a CTA runs KV heads blockIdx.y * heads_per_cta on in turn: the schedule and the mask tables are built
// once, K and V of head j + 1 load into the second of two K / V buffers while head j's visits run (once head j - 1's
// dK and dV have gone out through that buffer: kv_empty), and the MMA warpgroups meet at a barrier after each head's
// epilogue (its table of output rows lies in the first dQ buffer, which the next head's first dQ boxes overwrite); a
// CTA's fixed cost (setup, first loads, epilogue) is paid once per CTA instead of once per head. On other architectures
// the body is empty (the registry never selects it).
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/shared_access.cuh"
#include "cuda/fmha/fmha_backward_dq_convert.cuh"
#include "cuda/fmha/fmha_backward_dq_order.cuh"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_split.cuh"
#include "cuda/fmha/fmha_backward_tiles.cuh"
#include "cuda/fmha/fmha_backward_visit.cuh"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_backward_producer.cuh"
#include "cuda/fmha_sm90/fmha_sm90_dq_turns.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma_copy.cuh"

namespace attnkit::cuda::fmha_sm90 {

// Named barriers of the MMA warpgroups (0 is __syncthreads).
inline constexpr int kBarrierMma = 1;        // both MMA warpgroups
inline constexpr int kBarrierMmaGroup0 = 2;  // + warpgroup: one MMA warpgroup

// The fused dQ convert's end of the MMA warpgroups (fmha_backward_dq_convert.cuh): every dQ addition
// of theirs has completed (the issuing threads waited for their bulk groups).
template <class Traits>
__device__ __forceinline__ void convert_dq_when_last(const fmha::FmhaBackwardParams& p, int mtid) {
  fmha::convert_dq_if_last_cta<typename Traits::Portable>(p, mtid, Traits::kMmaThreads,
                                                          [] { named_barrier_sync(kBarrierMma, Traits::kMmaThreads); });
}

// The two MMA warpgroups' part of fmha_sm90_backward_dkdv_kernel: every visit's products, fast mode's dQ
// reductions, and the dK / dV stores. `group` is the MMA warpgroup (0, 1), `mtid` the thread among
// both (0 .. 255).
template <class Traits, bool kLists>
__device__ __forceinline__ void consume_backward_visits(const fmha::FmhaBackwardParams& p, const Sm90DqMap& dq_map,
                                                        const fmha::DecodedTile& kv, int32_t batch, int32_t head_kv,
                                                        int kv_heads, int count, typename Traits::SharedStorage& ss,
                                                        int group, int mtid) {
  using namespace cute;
  using namespace fmha;
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kKeys = Traits::kKeysPerGroup;
  const int wg_tid = mtid % 128;

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
  // Partial visits' mask bits: box policies from the CTA's mask tables (fmha_sm90_backward_mask.cuh) for
  // key rows row0 (+ 8); tile lists: element masks from the stage's key-major words (the producer's copies),
  // block masks from the mask tensor at the flat keys.
  int key_row[kRows];
  int32_t key_index[kRows][kMaxDims];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    key_row[i] = row0 + 8 * i;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) key_index[i][d] = kv.origin.index[d] + in_box(p.kv_space, d, key_row[i]);
  }

  // Columns of one swizzle atom's row, atoms across the head dim, 16-byte chunks in an atom's row (the epilogue).
  constexpr int kAtomCols = Traits::kSwizzleBytes / int(sizeof(Element));
  constexpr int kAtomColumns = kHeadDim / kAtomCols;
  constexpr int kChunksPerAtomRow = kAtomCols / 8;
  auto fixed_tile = [](auto* pointer, auto layout) { return make_tensor(make_smem_ptr(pointer), layout); };
  auto key_slice = [&](Element* tile) {
    return local_tile(fixed_tile(tile, typename Traits::SmemLayoutKV{}), Shape<Int<kKeys>, Int<kHeadDim>>{},
                      make_coord(group, 0));
  };

  Tensor acc_dk = partition_fragment_C(mma_g, Shape<Int<kKeys>, Int<kHeadDim>>{});
  Tensor acc_dv = partition_fragment_C(mma_g, Shape<Int<kKeys>, Int<kHeadDim>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor tGrP = make_tensor<Element>(partition_shape_A(mma_g, Shape<Int<kKeys>, Int<kBlockM>>{}));
  Tensor tGrDs = make_tensor<Element>(partition_shape_A(mma_g, Shape<Int<kKeys>, Int<kBlockM>>{}));

  // dQ: this warpgroup's dS tile, its dQ buffer and the TMA reductions' issuing thread. Ordered dQ: the
  // thread that takes the turns, and the counter whose turn it holds while its reductions complete.
  const bool issues_dq = p.accumulate_dq && dq_map.enabled && wg_tid == 0;
  const bool takes_turns = p.ordered_dq && wg_tid == 0;
  uint32_t* turn_in_flight = nullptr;
  auto pass_turn_in_flight = [&]() {
    if (turn_in_flight != nullptr) {
      bulk_wait_all();
      pass_dq_turn(turn_in_flight);
      turn_in_flight = nullptr;
    }
  };
  const int dq_boxes = min(Traits::kDqBoxes, (p.head_dim + kDqBoxColumns - 1) / kDqBoxColumns);
  float* dq_buffer = ss.dq[group];
  Tensor sDs = fixed_tile(ss.ds[group], typename Traits::SmemLayoutDs{});
  // This thread's first accumulator row within its warpgroup's 64: a key of the score tiles, a query of
  // the dQ tile (both m64 accumulators).
  const int k0 = row0 - group * kKeys;
  static_assert(kCols / 2 <= 8 && kBlockM * sizeof(Element) == 128, "one 128-byte row of queries per key");
  const uint32_t ds_base = shared_address(ss.ds[group]) + k0 * 128 + ((k0 & 7) << 4) + col0 * int(sizeof(Element));
  const int barrier_group = kBarrierMmaGroup0 + group;

  // acc += A * Ot, A (P^T or dS^T) packed in registers, Ot the MN-major view of the stage's dO or Q
  // tile: one committed batch (dV and dK).
  auto issue_gradient = [&](auto& a, Element* tile, auto& acc) {
    Tensor tGrOt = thread_g.partition_fragment_B(fixed_tile(tile, typename Traits::SmemLayoutQt{}));
    warpgroup_fence_operand(acc);
    warpgroup_fence_operand(a);
    warpgroup_arrive();
    issue_gemm<true>(mma_g, a, tGrOt, acc);
    warpgroup_commit_batch();
  };
  // Waits for dV and dK, which read stage b for the last time, and hands the stage back to the producer.
  auto release_stage = [&](int b) {
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_dv);
    warpgroup_fence_operand(acc_dk);
    warpgroup_fence_operand(tGrP);
    warpgroup_fence_operand(tGrDs);
    barrier_arrive(&ss.empty[b]);
  };

  // Element masks without staged words (D 128): the next visit's words are loaded once this visit has handed its
  // stage back and turned into its allowed bits after this visit's dQ product, so that the global loads run under
  // that product instead of in front of the next visit's probabilities, and only the two bit words stay live
  // into it.
  uint32_t next_words[kRows][2];
  uint32_t next_allowed[kRows];
  bool next_words_loaded = false;
  auto load_next_key_words = [&](int next, int end) {
    next_words_loaded = false;
    if constexpr (kLists && !Traits::kStagedKeyWords) {
      if (p.list.key_bits != nullptr && next < end) {
        const int bn = next % Traits::kStages;
        barrier_wait(&ss.full[bn], (next / Traits::kStages) & 1);  // waited again, at once, when its turn comes
        next_words_loaded = load_visit_key_words(p, batch, ss.visits[bn], key_index, next_words);
      }
    }
  };
  auto next_key_words_to_bits = [&] {
    if constexpr (kLists && !Traits::kStagedKeyWords) {
      if (next_words_loaded) visit_key_words_bits(next_words, col0, next_allowed);
    }
  };

  const int per_head = count / kv_heads;  // visits [j, j + 1) * per_head are KV head head_kv + j's
  for (int j = 0; j < kv_heads; ++j) {
    const int kv_buffer = j % Traits::kKvBuffers;
    barrier_wait(&ss.kv_full[kv_buffer], (j / Traits::kKvBuffers) & 1);
    next_words_loaded = false;
    for (int it = j * per_head; it < (j + 1) * per_head; ++it) {
      const int b = it % Traits::kStages;
      barrier_wait(&ss.full[b], (it / Traits::kStages) & 1);
      if constexpr (!kLists) {
        // A partial visit whose Q tile sees none of this warpgroup's keys: nothing to add (dS = 0). The
        // stage is handed back at once; the other warpgroup may still be using it.
        const fmha::QVisit& v = ss.visits[b];
        if (!v.full && !half_meets_visit(p, v, ss.masks.box, group * kKeys, kKeys)) {
          if (takes_turns) {  // nothing to add, but the turn is this warpgroup's
            const DqTurn turn =
                visit_dq_turn(p, batch, v, fmha::visit_dq_rank<kLists>(p, kv, batch, v), group, Traits::kMmaGroups);
            barrier_arrive(&ss.empty[b]);
            pass_turn_in_flight();
            wait_for_dq_turn(turn);
            pass_dq_turn(turn.counter);
          } else {
            barrier_arrive(&ss.empty[b]);
          }
          // The warpgroup's named barrier as often as a visit that computes (all its threads are here: no
          // wait), so that both warpgroups reach the epilogue having passed equally many barriers. With
          // unequal counts compute-sanitizer racecheck reported hazards on the epilogue's shared tables; with
          // equal counts it reports none (docs/perf.md, Hopper backward notes).
          const int barriers = p.accumulate_dq ? (dq_map.enabled ? 2 : (p.ordered_dq ? 3 : 1)) : 0;
          for (int k = 0; k < barriers; ++k) named_barrier_sync(barrier_group, 128);
          continue;
        }
      }
      const float* stats = ss.stats[b];

      // S^T and dP^T as two batches, the visit's mask bits while they run; P^T once S^T is done, then
      // dV += P^T dO runs while dS^T = P^T (dP^T - delta) is formed, and dK += dS^T Q.
      Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kKeys>, Int<kBlockM>>{});
      Tensor acc_dp = partition_fragment_C(mma_s, Shape<Int<kKeys>, Int<kBlockM>>{});
      {
        Tensor tSrK = thread_s.partition_fragment_A(key_slice(ss.k[kv_buffer]));
        Tensor tSrQ = thread_s.partition_fragment_B(fixed_tile(ss.q[b], typename Traits::SmemLayoutQ{}));
        Tensor tSrV = thread_s.partition_fragment_A(key_slice(ss.v[kv_buffer]));
        Tensor tSrdO = thread_s.partition_fragment_B(fixed_tile(ss.d_o[b], typename Traits::SmemLayoutQ{}));
        warpgroup_fence_operand(acc_s);
        warpgroup_fence_operand(acc_dp);
        warpgroup_arrive();
        issue_gemm<false>(mma_s, tSrK, tSrQ, acc_s);
        warpgroup_commit_batch();
        issue_gemm<false>(mma_s, tSrV, tSrdO, acc_dp);
        warpgroup_commit_batch();
      }
      if (takes_turns) {  // while S^T and dP^T run: the previous visit's reductions complete, this one's turn
        pass_turn_in_flight();
        const fmha::QVisit& v = ss.visits[b];
        ss.dq_turn[group] =
            visit_dq_turn(p, batch, v, fmha::visit_dq_rank<kLists>(p, kv, batch, v), group, Traits::kMmaGroups);
      }
      uint32_t allowed[kRows];  // bit j: column j of row i is attended
      if constexpr (kLists) {
        if (Traits::kStagedKeyWords && p.list.key_bits != nullptr) {  // the stage's words (none for full visits)
#pragma unroll
          for (int i = 0; i < kRows; ++i) allowed[i] = ~0u;
          if (visit_has_key_words(p, ss.visits[b])) {
            key_words_allowed_bits(ss.masks.key_words[b], key_index, kv.origin.index[0], col0, allowed);
          }
        } else {
          const fmha::QVisit& v = ss.visits[b];
          uint32_t words[kRows][2];
          if (next_words_loaded) {
#pragma unroll
            for (int i = 0; i < kRows; ++i) allowed[i] = next_allowed[i];
          } else if (load_visit_key_words(p, batch, v, key_index, words)) {
            visit_key_words_bits(words, col0, allowed);
          } else {
            visit_allowed_bits<kLists, kBlockM>(p, batch, v, key_index, col_of, nullptr, allowed);
          }
        }
      } else {
        box_allowed_bits(p, ss.visits[b], ss.masks.box, col0 / 2, key_row, allowed);
      }
      warpgroup_wait<1>();  // S^T done; dP^T may still run
      warpgroup_fence_operand(acc_s);
      scores_to_probabilities(gmma_rows_cols(acc_s), allowed, stats, col_of, p.scale_log2);
      pack_accumulator<Element>(acc_s, tGrP);
      issue_gradient(tGrP, ss.d_o[b], acc_dv);
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
      issue_gradient(tGrDs, ss.q[b], acc_dk);

      if (!p.accumulate_dq) {
        release_stage(b);
        load_next_key_words(it + 1, (j + 1) * per_head);
        next_key_words_to_bits();
        continue;
      }

      // dS^T (keys as rows) -> dS query-major: word w of the packed fragment holds queries
      // col0 + 8 (w / 2) and + 1 of key k0 + 8 (w % 2), one 32-bit store each. In SmemLayoutDs (64 queries
      // contiguous per 128-byte key row, 16-byte chunks swizzled by key % 8) that is byte
      // (k0 + 8 (w % 2)) * 128 + ((w / 2) ^ (k0 % 8)) * 16 + 2 col0 = (ds_base ^ ((w / 2) << 4)) + (w % 2) * 1024:
      // one 32-bit base, where generic 64-bit addresses per store spilled. The tile is free: the previous
      // visit's dQ product was waited for.
#pragma unroll
      for (int w = 0; w < kCols; ++w) {
        store_shared_word((ds_base ^ ((w / 2) << 4)) + (w % 2) * 8 * 128,
                          reinterpret_cast<const uint32_t*>(raw_pointer_cast(tGrDs.data()))[w]);
      }
      // What the dQ additions need from the stage, read before it is released: the first box's coordinates
      // (TMA) or this thread's two accumulator rows (red.global).
      int64_t dq_row[kRows];
      if (dq_map.enabled) {
        if (issues_dq) {
          bulk_wait_sources_read();  // the previous visit's boxes have left the buffer
          const fmha::QVisit& v = ss.visits[b];
          int32_t c[5];
          box_coordinates(p.dims, p.dilation, p.q_space.extent[0], dq_map.fold_batch != 0, dq_map.has_batch != 0,
                          v.origin, v.head, batch, c);
#pragma unroll
          for (int k = 0; k < 5; ++k) ss.dq_box[group][k] = c[k];
        }
      } else {
#pragma unroll
        for (int i = 0; i < kRows; ++i) dq_row[i] = ss.dq_rows[b][k0 + 8 * i];
      }
      fence_generic_to_async_shared();
      named_barrier_sync(barrier_group, 128);  // dS published; the dQ buffer is free

      Tensor acc_dq = partition_fragment_C(mma_q, Shape<Int<kBlockM>, Int<Traits::kDqColumns>>{});
      auto issue_dq = [&] {
        Tensor tQrDs = thread_q.partition_fragment_A(sDs);
        Tensor tQrKt = thread_q.partition_fragment_B(
            local_tile(fixed_tile(ss.k[kv_buffer], typename Traits::SmemLayoutKt{}),
                       Shape<Int<Traits::kDqColumns>, Int<Traits::kDqDepth>>{}, make_coord(0, group)));
        warpgroup_fence_operand(acc_dq);
        warpgroup_arrive();
        issue_gemm<false>(mma_q, tQrDs, tQrKt, acc_dq);
        warpgroup_commit_batch();
      };
      if constexpr (Traits::kDqBehindGradients) {
        issue_dq();
        release_stage(b);  // dV, dK and dQ done
        warpgroup_fence_operand(acc_dq);
        load_next_key_words(it + 1, (j + 1) * per_head);
      } else {
        release_stage(b);
        load_next_key_words(it + 1, (j + 1) * per_head);
        issue_dq();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_dq);
      }
      next_key_words_to_bits();
      // The accumulator map: query rows k0 (+ 8), columns col0 + 8 (j / 2) (+ 1).
      Tensor dq = gmma_rows_cols(acc_dq);
      if (dq_map.enabled) {
        // Element (r, c) lies in box c / 32 at row r, its 16-byte chunk (c % 32) / 4 swizzled to
        // ((c % 32) / 4) ^ (r % 8). This thread's columns c = col0 + 8 m' (col0 < 8 even) and rows r0, r0 + 8
        // share r % 8, so every address is dq_base ^ ((m' % 4) << 5) plus a constant (box, row) offset:
        // one 32-bit base, where generic 64-bit addresses per store spilled. Rows: k0 (+ 8).
        const uint32_t dq_base =
            shared_address(dq_buffer) + k0 * 128 + (((col0 >> 2) ^ (k0 & 7)) << 4) + (col0 & 3) * int(sizeof(float));
#pragma unroll
        for (int i = 0; i < size<0>(dq); ++i) {
#pragma unroll
          for (int j = 0; j < size<1>(dq); j += 2) {
            const int column_block = j / 2;  // m'
            const uint32_t address = (dq_base ^ ((column_block % 4) << 5)) +
                                     (column_block / 4) * Traits::kDqBoxFloats * int(sizeof(float)) + i * 8 * 128;
            store_shared_pair(address, dq(i, j), dq(i, j + 1));
          }
        }
        fence_generic_to_async_shared();
        named_barrier_sync(barrier_group, 128);  // the dQ boxes are complete
        if (issues_dq) {
          int32_t c[5];
#pragma unroll
          for (int k = 0; k < 5; ++k) c[k] = ss.dq_box[group][k];
          const DqTurn turn = takes_turns ? ss.dq_turn[group] : DqTurn{};
          if (takes_turns) wait_for_dq_turn(turn);
          for (int box = 0; box < dq_boxes; ++box) {
            c[0] = box * kDqBoxColumns;
            tma_reduce_add_box(&dq_map.map, dq_buffer + box * Traits::kDqBoxFloats, dq_map.rank, c);
          }
          bulk_commit_group();
          if (takes_turns) turn_in_flight = turn.counter;
        }
      } else {
        const DqTurn turn = takes_turns ? ss.dq_turn[group] : DqTurn{};
        if (p.ordered_dq) {
          if (takes_turns) wait_for_dq_turn(turn);
          named_barrier_sync(barrier_group, 128);  // the warpgroup's turn
        }
        float* accumulator = static_cast<float*>(p.dq_accum.data);
#pragma unroll
        for (int i = 0; i < size<0>(dq); ++i) {
#pragma unroll
          for (int j = 0; j < size<1>(dq); j += 2) {
            const int c = col0 + 8 * (j / 2);
            fmha::reduce_add_pair_if(dq_row[i] >= 0 && c < p.head_dim, accumulator + dq_row[i] + c, dq(i, j),
                                     dq(i, j + 1));
          }
        }
        if (p.ordered_dq) {
          __threadfence();
          named_barrier_sync(barrier_group, 128);  // every thread's additions are performed
          if (takes_turns) pass_dq_turn(turn.counter);
        }
      }
    }
    if (issues_dq) bulk_wait_all();
    if (takes_turns) pass_turn_in_flight();

    if (p.kv_splits > 1) {  // one KV head per CTA: this split's unscaled partials, straight from the accumulators
      const KvSplitCta cta = kv_split_cta(p);  // from blockIdx again: nothing more lives across the visits
      const int64_t slab =
          kv_partial_offset(p, cta.split, batch, head_kv, cta.tile, kBlockN) + group * kKeys * kHeadDim;
      store_partial_tile<kKeys, kHeadDim>(thread_g, acc_dk, p.dk_partial + slab);
      store_partial_tile<kKeys, kHeadDim>(thread_g, acc_dv, p.dv_partial + slab);
      break;
    }
    // Every product has read K and V, and every dQ box has left its buffer: K and V take the outputs, the
    // first dQ buffer a table of the output rows' starts (each thread computes one: dK rows, then dV rows).
    named_barrier_sync(kBarrierMma, Traits::kMmaThreads);
    static_assert(Traits::kMmaThreads == 2 * kBlockN, "one output row per MMA thread");
    static_assert(sizeof(Element*) * Traits::kMmaThreads <= sizeof(ss.dq[0]), "the row table fits a dQ buffer");
    Element** output_rows = reinterpret_cast<Element**>(ss.dq[0]);
    {
      const bool is_dv = mtid >= kBlockN;
      const fmha::TensorAddress& out = is_dv ? p.d_v : p.d_k;
      const int64_t head_offset = batch * out.batch_stride + (head_kv + j) * out.head_stride;
      output_rows[mtid] = tile_row_output<Element>(out, head_offset, p.kv_space, p.dilation, kv.origin, mtid % kBlockN);
    }
#pragma unroll
    for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= p.scale;
    Tensor sK = make_tensor(make_smem_ptr(ss.k[kv_buffer]), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v[kv_buffer]), typename Traits::SmemLayoutKV{});
    {
      // Through 32-bit shared addresses, one per row and swizzle-atom column: the swizzle permutes a row's 16-byte
      // chunks inside an atom by an XOR of address bits 4.., so chunk c lies at chunk 0's address XOR (c << 4)
      // (CuTe's swizzled pointers are generic: stores and loads through them are generic ones).
      Tensor dk = gmma_rows_cols(acc_dk);
      Tensor dv = gmma_rows_cols(acc_dv);
      static_assert(decltype(size<1>(dk))::value == kAtomColumns * kChunksPerAtomRow * 2, "8 columns a chunk");
#pragma unroll
      for (int i = 0; i < size<0>(dk); ++i) {
        const int row = row0 + 8 * i;
#pragma unroll
        for (int b = 0; b < kAtomColumns; ++b) {
          const uint32_t k_chunk0 = shared_address(&sK(row, b * kAtomCols + col0));
          const uint32_t v_chunk0 = shared_address(&sV(row, b * kAtomCols + col0));
#pragma unroll
          for (int c = 0; c < kChunksPerAtomRow; ++c) {
            const int j = 2 * (b * kChunksPerAtomRow + c);
            store_shared_word(k_chunk0 ^ (uint32_t(c) << 4), pack_pair<Element>(dk(i, j), dk(i, j + 1)));
            store_shared_word(v_chunk0 ^ (uint32_t(c) << 4), pack_pair<Element>(dv(i, j), dv(i, j + 1)));
          }
        }
      }
    }
    named_barrier_sync(kBarrierMma, Traits::kMmaThreads);
    // A pass advances kStoreRowsPerPass rows, a multiple of the swizzle's period of 8 rows, inside one atom column.
    static_assert(Traits::kStoreRowsPerPass % 8 == 0, "passes keep the swizzle's row phase");
    constexpr uint32_t kPassBytes = Traits::kStoreRowsPerPass * kAtomCols * uint32_t(sizeof(Element));
    const int col = (mtid % Traits::kChunksPerRow) * 8;
    const int first_row = mtid / Traits::kChunksPerRow;
    const uint32_t k_first = shared_address(&sK(first_row, col));
    const uint32_t v_first = shared_address(&sV(first_row, col));
#pragma unroll
    for (int pass = 0; pass < kBlockN / Traits::kStoreRowsPerPass; ++pass) {
      const int row = first_row + pass * Traits::kStoreRowsPerPass;
      Element* dk_row = output_rows[row];
      Element* dv_row = output_rows[kBlockN + row];
      if (col < p.head_dim && dk_row != nullptr) {
        *reinterpret_cast<uint4*>(dk_row + col) = load_shared_chunk(k_first + pass * kPassBytes);
      }
      if (col < p.head_dim_v && dv_row != nullptr) {
        *reinterpret_cast<uint4*>(dv_row + col) = load_shared_chunk(v_first + pass * kPassBytes);
      }
    }
    // This thread has read its rows of sK and sV: the producer may load a later head into the buffer.
    if (j + Traits::kKvBuffers < kv_heads) barrier_arrive(&ss.kv_empty[kv_buffer]);
    if (j + 1 < kv_heads) {
      clear(acc_dk);
      clear(acc_dv);
      // Every MMA thread has read the output row table before either warpgroup stores the next head's first dQ
      // boxes over it (the table lies in the first dQ buffer; the next head's K and V may already wait in the
      // other buffer, so nothing else holds a warpgroup back).
      named_barrier_sync(kBarrierMma, Traits::kMmaThreads);
    }
  }
  if (p.dq_done != nullptr) convert_dq_when_last<Traits>(p, mtid);
}

template <class Traits, template <int> class ScheduleTemplate, bool kLists>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    fmha_sm90_backward_dkdv_kernel(const __grid_constant__ fmha::FmhaBackwardParams p,
                                   const __grid_constant__ Sm90DqMap dq_map) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Storage = typename Traits::SharedStorage;
  using Schedule = ScheduleTemplate<Traits::kBlockM>;
  extern __shared__ char smem_raw[];
  // Aligned to 1 KiB by an offset from smem_raw itself (not through an integer), so that the compiler still knows the
  // storage is shared memory and reads its tables and flags with shared loads instead of generic ones.
  Storage& ss = *reinterpret_cast<Storage*>(smem_raw + ((0u - shared_address(smem_raw)) & 1023u));
  // The KV tile's description is read by both roles and at the end (stores): kept in shared memory. Both
  // 16-byte aligned: the producer reads kv_shared with 16-byte loads while an MMA warp writes the
  // schedule state, and a load that began inside the state would read (and discard) bytes being written
  // (compute-sanitizer racecheck reports it).
  __shared__ alignas(16) typename Schedule::State schedule_state;
  __shared__ alignas(16) fmha::DecodedTile kv_shared;

  const int tid = static_cast<int>(threadIdx.x);
  // The warpgroup, broadcast from lane 0 so that the compiler sees the role branches as warp-uniform
  // (wgmma in a branch it thinks divergent is serialised).
  const int warp_group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const fmha::KvSplitCta cta = fmha::kv_split_cta(p);
  {
    const fmha::DecodedTile kv = fmha::decode_tile(p, cta.tile, p.kv_tiles, p.kv_space, p.q_space, false);
    if (!kv.valid) {  // uniform over the CTA
      if (p.dq_done != nullptr) {
        fmha::convert_dq_if_last_cta<typename Traits::Portable>(p, tid, Traits::kThreads, [] { __syncthreads(); });
      }
      return;
    }
    if (tid == 0) kv_shared = kv;
  }
  // The CTA's first KV head and its count.
  const int32_t head_kv = static_cast<int32_t>(blockIdx.y) * (Traits::kSeveralHeadsPerCta ? p.heads_per_cta : 1);
  const int kv_heads = Traits::kSeveralHeadsPerCta ? min(p.heads_per_cta, p.heads_kv - head_kv) : 1;
  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  __syncthreads();  // kv_shared
  const fmha::DecodedTile& kv = kv_shared;
  // K and V load while the first MMA warp computes the visit schedule (the producer's first cp.async group).
  if (warp_group == 0) issue_kv_loads<Traits>(p, kv, batch, head_kv, ss, tid, 0);
  Schedule schedule;
  schedule.init(p, kv, batch, head_kv, &schedule_state, tid - Traits::kProducerThreads, kv_heads);
  // The mask tables on the MMA warps that do not search the schedule (the first MMA warp does).
  constexpr int kTableThreadsStart = Traits::kProducerThreads + 32;
  if (!kLists && tid >= kTableThreadsStart) {
    build_box_mask_tables(p, kv, ss.masks.box, tid - kTableThreadsStart, Traits::kThreads - kTableThreadsStart);
  }
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < Traits::kKvBuffers; ++b) {
      barrier_init(&ss.kv_full[b], Traits::kProducerThreads);
      barrier_init(&ss.kv_empty[b], Traits::kMmaThreads);
    }
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      barrier_init(&ss.full[s], Traits::kProducerThreads);
      barrier_init(&ss.empty[s], Traits::kMmaThreads);
    }
    barrier_init_fence();
  }
  __syncthreads();  // schedule state and barriers published
  const fmha::VisitRange range = fmha::split_visit_range(p, cta.split, schedule.count());

  if (warp_group == 0) {
    warpgroup_registers_shrink<Traits::kProducerRegisters>();
    produce_backward_visits<Traits, kLists>(p, dq_map, kv, batch, head_kv, kv_heads, schedule, range, ss, tid);
  } else {
    warpgroup_registers_grow<Traits::kMmaRegisters>();
    const int mtid = tid - Traits::kProducerThreads;
    consume_backward_visits<Traits, kLists>(p, dq_map, kv, batch, head_kv, kv_heads, range.count, ss, warp_group - 1,
                                            mtid);
  }
#endif
}

}  // namespace attnkit::cuda::fmha_sm90
