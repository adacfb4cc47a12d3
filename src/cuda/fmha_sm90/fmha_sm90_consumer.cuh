// A consumer warpgroup of the Hopper forward kernel: 64 query rows, FlashAttention-2 online softmax.
//
// Per KV tile i, on this warpgroup's turn: issue S = Q*K(i)^T (m64nBlockNk16 wgmmas, both operands in
// shared memory, fp32 accumulators) and O += P(i-1)*V(i-1) (register-A wgmmas) as two commit groups,
// hand the turn to the next warpgroup, wait for S(i) alone and release K(i); mask a partial tile
// through the portable policy's row masks and exponentiate (the online softmax's maxima, exponentials
// and sums) while P(i-1)*V(i-1) still runs; then wait for that product, release V(i-1), rescale O and
// convert P(i) to fp16/bf16 in place of the A-operand registers (the m64nN accumulator and the m64k16 A
// fragment share their thread -> element map). Two or three warpgroups take turns in a fixed rotation, so one's
// softmax overlaps the others' products; a 64-row CTA's one warpgroup issues as soon as its operands are there. The
// first turn issues S(0)
// alone and the last P*V(last) alone: peeled, because a wgmma under a loop-variant condition is serialised by ptxas.
// The epilogue normalises O, writes the LSE, stages O through this warpgroup's 64 rows of the Q buffer and stores whole
// 16-byte chunks of token rows. A CTA may run several heads in turn with the same tiles (FmhaParams::heads_per_cta):
// the loop above, once per head.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/shared_access.cuh"
#include "cuda/fmha/fmha_epilogue.cuh"
#include "cuda/fmha/fmha_fragment.cuh"
#include "cuda/fmha/fmha_mask_tables.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/fmha/fmha_params.hpp"
#include "cuda/fmha/fmha_softmax.cuh"
#include "cuda/fmha/fmha_tokens.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tile_walk.cuh"

namespace attnkit::cuda::fmha_sm90 {

template <class Traits, class Policy>
struct Sm90Consumer {
  using Element = typename Traits::Element;
  using PolicyTraits = typename Traits::PolicyTraits;
  using Storage = typename Traits::SharedStorage;
  static constexpr int kRows = PolicyTraits::kRows;
  static constexpr int kCols = PolicyTraits::kCols;
  static constexpr int kGroups = Traits::kConsumerGroups;
  static constexpr bool kTakesTurns = kGroups > 1;
  // Named barriers: 1 the producer's, kEpilogueBarrier + group a warpgroup's epilogue, kTurnBarrier + group whose
  // turn it is to issue products.
  static constexpr int kEpilogueBarrier = 2;
  static constexpr int kTurnBarrier = kEpilogueBarrier + 3;
  static_assert(kGroups <= 3 && kTurnBarrier + kGroups <= 16, "named barrier ids");

  // ctid: thread index among the consumers; group: 0 .. kGroups - 1 (query rows 64*group ...), warp-uniform.
  // Runs heads cta.head .. cta.head + heads - 1 in turn; their KV tiles share one run of stage/phase
  // counters (tile i of head j is the CTA's tile j * count + i). Head j reads Q buffer j % kQBuffers and stages
  // its O there; the buffer goes back to the producer through q_empty when a later head needs it.
  __device__ __forceinline__ void operator()(const fmha::FmhaParams& p, const fmha::CtaTile& cta, int heads,
                                             const Policy& policy, Storage& ss, const int (&row_of)[kRows], int ctid,
                                             int group) const {
    using namespace cute;
    const int wg_tid = ctid % 128;
    Tensor sK = make_tensor(make_smem_ptr(ss.k), typename Traits::SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(ss.v), typename Traits::SmemLayoutVt{});

    typename Traits::MmaS mma_s;
    typename Traits::MmaO mma_o;
    auto thread_s = mma_s.get_thread_slice(wg_tid);
    auto thread_o = mma_o.get_thread_slice(wg_tid);
    Tensor tSrK = thread_s.partition_fragment_B(sK);   // (MMA, 1, K, stage)
    Tensor tOrV = thread_o.partition_fragment_B(sVt);  // (MMA, 1, keys/16, stage)
    Tensor acc_s = partition_fragment_C(mma_s, Shape<_64, Int<Traits::kBlockN>>{});
    Tensor acc_o = partition_fragment_C(mma_o, Shape<_64, Int<Traits::kHeadDim>>{});
    Tensor tOrP = make_tensor<Element>(partition_shape_A(mma_o, Shape<_64, Int<Traits::kBlockN>>{}));
    static_assert(decltype(size(tOrP))::value == decltype(size(acc_s))::value, "P fills the A fragment");
    Tensor s = gmma_rows_cols(acc_s);
    Tensor o = gmma_rows_cols(acc_o);
    static_assert(decltype(size<0>(s))::value == kRows && decltype(size<1>(s))::value == kCols, "policy view");
    const int lane_class = ctid % 4;
    const int count = policy.count();
    [[maybe_unused]] const int next_group = group + 1 == kGroups ? 0 : group + 1;

    for (int head = 0; head < heads; ++head) {
      const int q_buffer = head % Traits::kQBuffers;
      Tensor sQ = make_tensor(make_smem_ptr(ss.q[q_buffer]), typename Traits::SmemLayoutQ{});
      Tensor sQg = local_tile(sQ, Shape<_64, Int<Traits::kHeadDim>>{}, make_coord(group, _0{}));
      Tensor tSrQ = thread_s.partition_fragment_A(sQg);  // (MMA, 1, K) descriptors
      clear(acc_o);
      fmha::OnlineSoftmax<kRows> softmax;
      softmax.reset();
      barrier_wait(&ss.q_full[q_buffer], (head / Traits::kQBuffers) & 1);
      const int base = head * count;  // the CTA's index of this head's tile 0
      TileWalk<Policy> walk(policy);
      if constexpr (!Traits::kSoftmaxOverlapsPv) {
        serial_turns(p, policy, ss, row_of, ctid, tSrQ, tSrK, tOrV, acc_s, acc_o, tOrP, softmax, walk, base);
        finish_head(p, cta, head, heads, ss, acc_o, softmax, row_of, sQ, ctid, group);
        continue;
      }
      // Turns among the consumer warpgroups, in the rotation 0, 1, (2,) 0, ...: a warpgroup issues its products
      // only after the previous one has issued its own (named barrier kTurnBarrier + group: this warpgroup's
      // sync and the previous one's arrival), so the tensor cores run one warpgroup's S(i) = Q*K(i)^T and
      // O += P(i-1)*V(i-1) while the others' softmax runs. The one consumer warpgroup of a 64-row CTA has no
      // partner: it issues when its operands are there.
      auto wait_for_turn = [&] {
        if constexpr (kTakesTurns) named_barrier_sync(kTurnBarrier + group, 256);
      };
      auto pass_turn = [&] {
        if constexpr (kTakesTurns) named_barrier_arrive(kTurnBarrier + next_group, 256);
      };
      if constexpr (kTakesTurns) {
        if (group == kGroups - 1) named_barrier_arrive(kTurnBarrier + 0, 256);  // group 0 goes first
      }
      float correction[kRows];
      // Tile i's softmax between two turns, in two steps: masking and exponentials (needs S(i) only, so it
      // runs while P(i-1) * V(i-1) is still in the tensor cores), then the O rescale and the conversion of
      // P(i) into the A-operand registers (after that product has completed).
      auto scores_step = [&](const typename Policy::TileBits& bits) {
        if (!walk.tile.full) {
          uint32_t masks[kRows];
          policy.row_masks(walk.tile, bits, row_of, lane_class, masks);
          fmha::apply_row_masks<kRows, kCols>(s, masks);
        }
        softmax.update_scores(s, p.scale_log2, correction);
      };
      auto output_step = [&](int i) {
        fmha::OnlineSoftmax<kRows>::rescale(o, correction);
        pack_accumulator<Element>(acc_s, tOrP);
        walk.advance(policy, i);
      };
      // A tile's mask bits (tile-list policies) are loaded a turn ahead: tile i + 1's once turn i's products are
      // issued (its list entry, walk.ahead, was read at the end of turn i - 1), so the load has the rest of turn i
      // to arrive instead of part of its own turn.
      typename Policy::TileBits next_bits{};
      auto fetch_next_bits = [&](int i) {
        if (i + 1 < count) next_bits = policy.fetch_bits(policy.next_tile(walk.tile, walk.ahead), p, ctid);
      };
      if (count > 0) {
        // First turn: S(0) only.
        const int stage = base % Traits::kStages;
        const typename Policy::TileBits bits = policy.fetch_bits(walk.tile, p, ctid);
        barrier_wait(&ss.k_full[stage], (base / Traits::kStages) & 1);
        wait_for_turn();
        warpgroup_fence_operand(acc_s);
        warpgroup_arrive();
        issue_gemm<false>(mma_s, tSrQ, tSrK(_, _, _, stage), acc_s);
        warpgroup_commit_batch();
        pass_turn();
        fetch_next_bits(0);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        barrier_arrive(&ss.k_empty[stage]);
        scores_step(bits);
        output_step(0);
      }
      for (int i = 1; i < count; ++i) {
        // Turn i: S(i) and O += P(i-1) * V(i-1) as one batch.
        const int tile = base + i;
        const int stage = tile % Traits::kStages;
        const int previous = (tile - 1) % Traits::kStages;
        const typename Policy::TileBits bits = next_bits;
        barrier_wait(&ss.k_full[stage], (tile / Traits::kStages) & 1);
        barrier_wait(&ss.v_full[previous], ((tile - 1) / Traits::kStages) & 1);
        wait_for_turn();
        warpgroup_fence_operand(acc_s);
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        warpgroup_arrive();
        issue_gemm<false>(mma_s, tSrQ, tSrK(_, _, _, stage), acc_s);
        warpgroup_commit_batch();
        issue_gemm<true>(mma_o, tOrP, tOrV(_, _, _, previous), acc_o);
        warpgroup_commit_batch();
        pass_turn();
        fetch_next_bits(i);
        warpgroup_wait<1>();  // S(i) is complete; P(i-1) * V(i-1) may still run during the exponentials
        warpgroup_fence_operand(acc_s);
        barrier_arrive(&ss.k_empty[stage]);
        scores_step(bits);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);  // the registers stay P(i-1)'s until the product has read them
        barrier_arrive(&ss.v_empty[previous]);
        output_step(i);
      }
      if (count > 0) {
        // Last turn: O += P(last) * V(last).
        const int tile = base + count - 1;
        const int last = tile % Traits::kStages;
        barrier_wait(&ss.v_full[last], (tile / Traits::kStages) & 1);
        wait_for_turn();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        warpgroup_arrive();
        issue_gemm<true>(mma_o, tOrP, tOrV(_, _, _, last), acc_o);
        warpgroup_commit_batch();
        pass_turn();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        barrier_arrive(&ss.v_empty[last]);
      }
      // The last group arrived once more than group 0 waited (its opening turn): consume it.
      if constexpr (kTakesTurns) {
        if (group == 0) named_barrier_sync(kTurnBarrier + 0, 256);
      }
      finish_head(p, cta, head, heads, ss, acc_o, softmax, row_of, sQ, ctid, group);
    }
  }

  // After head `head`'s last tile (of `heads` the CTA runs in turn): its epilogue, then its Q buffer back to the
  // producer when a later head needs it.
  template <class AccO, class SmemQ>
  __device__ __forceinline__ void finish_head(const fmha::FmhaParams& p, const fmha::CtaTile& cta, int head, int heads,
                                              Storage& ss, AccO& acc_o, fmha::OnlineSoftmax<kRows>& softmax,
                                              const int (&row_of)[kRows], SmemQ& sQ, int ctid, int group) const {
    fmha::CtaTile head_cta = cta;
    head_cta.head += head;
    epilogue(p, head_cta, acc_o, softmax, row_of, sQ, ctid, group);
    if (head + Traits::kQBuffers < heads) {
      fence_generic_to_async_shared();  // the O staging's shared accesses before a later Q's TMA writes
      barrier_arrive(&ss.q_empty[head % Traits::kQBuffers]);
    }
  }

  // The turns of kernels whose consumers cannot hold S(i), P(i-1) and O at once (Traits::kSoftmaxOverlapsPv false):
  // per tile, S(i) = Q*K(i)^T, its softmax, then O += P(i)*V(i), each product waited for before the next step, so
  // S and P never live together. The warpgroups do not take turns: the other warpgroups on the SM (this CTA's and
  // the other resident CTA's) fill the tensor cores while this one waits or exponentiates.
  template <class TQ, class TK, class TV, class AccS, class AccO, class FragP, class Softmax, class Walk>
  __device__ __forceinline__ void serial_turns(const fmha::FmhaParams& p, const Policy& policy, Storage& ss,
                                               const int (&row_of)[kRows], int ctid, TQ& tSrQ, TK& tSrK, TV& tOrV,
                                               AccS& acc_s, AccO& acc_o, FragP& tOrP, Softmax& softmax, Walk& walk,
                                               int base) const {
    using namespace cute;
    typename Traits::MmaS mma_s;
    typename Traits::MmaO mma_o;
    Tensor s = gmma_rows_cols(acc_s);
    Tensor o = gmma_rows_cols(acc_o);
    const int lane_class = ctid % 4;
    const int count = policy.count();
    for (int i = 0; i < count; ++i) {
      const int tile = base + i;
      const int stage = tile % Traits::kStages;
      const int phase = (tile / Traits::kStages) & 1;
      const typename Policy::TileBits bits = policy.fetch_bits(walk.tile, p, ctid);
      barrier_wait(&ss.k_full[stage], phase);
      warpgroup_fence_operand(acc_s);
      warpgroup_arrive();
      issue_gemm<false>(mma_s, tSrQ, tSrK(_, _, _, stage), acc_s);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_s);
      barrier_arrive(&ss.k_empty[stage]);
      if (!walk.tile.full) {
        uint32_t masks[kRows];
        policy.row_masks(walk.tile, bits, row_of, lane_class, masks);
        fmha::apply_row_masks<kRows, kCols>(s, masks);
      }
      float correction[kRows];
      softmax.update_scores(s, p.scale_log2, correction);
      fmha::OnlineSoftmax<kRows>::rescale(o, correction);
      pack_accumulator<Element>(acc_s, tOrP);
      walk.advance(policy, i);
      barrier_wait(&ss.v_full[stage], phase);
      warpgroup_fence_operand(acc_o);
      warpgroup_fence_operand(tOrP);
      warpgroup_arrive();
      issue_gemm<true>(mma_o, tOrP, tOrV(_, _, _, stage), acc_o);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_o);
      warpgroup_fence_operand(tOrP);
      barrier_arrive(&ss.v_empty[stage]);
    }
  }

  template <class AccO, class SmemQ>
  __device__ __forceinline__ void epilogue(const fmha::FmhaParams& p, const fmha::CtaTile& cta, AccO& acc_o,
                                           fmha::OnlineSoftmax<kRows>& softmax, const int (&row_of)[kRows], SmemQ& sQ,
                                           int ctid, int group) const {
    using namespace cute;
    Tensor o = gmma_rows_cols(acc_o);
    float lse[kRows];
    softmax.finalize(o, p.scale_log2, lse);

    fmha::store_lse_rows(p, cta, lse, row_of, ctid % 4 == 0);

    // Registers -> this warpgroup's rows of the Q buffer (its last wgmma read of Q has completed), through 32-bit
    // shared addresses: within a row of a swizzle atom (kChunkColumns columns) the swizzle permutes the 16-byte
    // chunks by an XOR of address bits 4.. with a function of the row, so chunk c of a row lies at chunk 0's
    // address XOR (c << 4). One address per row and atom column, not one 64-bit generic pointer per chunk (those would
    // stay live across the head loop and spill at the consumers' register budget).
    constexpr int kAtomColumns = Traits::kHeadDim / Traits::kChunkColumns;
    constexpr int kChunksPerAtomRow = Traits::kChunkColumns / Traits::kElementsPerChunk;
    static_assert(kAtomColumns * kChunksPerAtomRow == decltype(size<1>(o))::value / 2, "8 columns a chunk");
    const int first_col = 2 * (ctid % 4);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int b = 0; b < kAtomColumns; ++b) {
        const uint32_t chunk0 = shared_address(&sQ(row_of[i], b * Traits::kChunkColumns + first_col));
#pragma unroll
        for (int c = 0; c < kChunksPerAtomRow; ++c) {
          const int j = b * kChunksPerAtomRow + c;
          store_shared_word(chunk0 ^ (uint32_t(c) << 4), fmha::pack_pair<Element>(o(i, 2 * j), o(i, 2 * j + 1)));
        }
      }
    }
    named_barrier_sync(kEpilogueBarrier + group, 128);

    // Shared -> global, one 16-byte chunk per thread and pass. A pass advances kRowsPerPass rows, a multiple of the
    // swizzle's period of 8 rows, inside one atom column: the same chunk lies kRowsPerPass rows further on.
    const int wg_tid = ctid % 128;
    const int col = (wg_tid % Traits::kChunksPerRow) * Traits::kElementsPerChunk;
    if (col >= p.head_dim_v) return;
    constexpr int kRowsPerPass = 128 / Traits::kChunksPerRow;
    static_assert(kRowsPerPass % 8 == 0, "passes keep the swizzle's row phase");
    constexpr uint32_t kPassBytes = kRowsPerPass * Traits::kChunkColumns * uint32_t(sizeof(Element));
    const int first_row = group * Traits::kRowsPerConsumer + wg_tid / Traits::kChunksPerRow;
    const uint32_t first_chunk = shared_address(&sQ(first_row, col));
    const int64_t head_offset = cta.batch * p.o.batch_stride + cta.head * p.o.head_stride;
    Element* out = static_cast<Element*>(p.o.data);
#pragma unroll
    for (int pass = 0; pass < Traits::kRowsPerConsumer / kRowsPerPass; ++pass) {
      const fmha::RowToken t = fmha::row_token(p.q_space, p.dilation, cta.q, first_row + pass * kRowsPerPass);
      if (t.valid) {
        const uint4 chunk = load_shared_chunk(first_chunk + pass * kPassBytes);
        *reinterpret_cast<uint4*>(out + head_offset + fmha::token_offset(p.o, t) + col) = chunk;
      }
    }
  }
};

}  // namespace attnkit::cuda::fmha_sm90
