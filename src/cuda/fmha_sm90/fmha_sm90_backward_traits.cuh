// Compile-time shape of one Hopper backward dK/dV instantiation (fmha_sm90_backward_dkdv.cuh): element
// type, compiled head dim, tiles (BlockM = 64 queries per visit, BlockN = 128 or 64 keys: 64 per MMA
// warpgroup), the warp roles, the warpgroup MMAs and the shared-memory layouts.
//
// A producer warpgroup (warpgroup 0: K and V once, then each visit's Q, dO, row statistics and dQ row
// offsets into two stages) and one MMA warpgroup per 64 keys: MMA warpgroup w (warpgroup w + 1) owns keys
// 64w .. 64w + 63. The KV tiles of 64 keys (one MMA warpgroup) run two CTAs per SM: smaller KV boxes for
// small windows, and one CTA's setup, first loads and epilogue beside the other's products. Every product is
// one wgmma shape per MMA warpgroup:
//   MmaScores (SS, 64 keys x 64 queries x D):  S^T = K Q^T and dP^T = V dO^T (both K-major);
//   MmaGrads  (RS, 64 keys x D x 64 queries):  dV += P^T dO and dK += dS^T Q, P^T and dS^T from the
//             score accumulators' registers, dO and Q read MN-major (their rows are the reduction);
//   MmaDq     (SS, 64 queries x D x 64 keys, both MN-major): fast mode's partial dQ = dS K over the
//             warpgroup's own keys, from its query-major dS tile and its slice of the K tile; both
//             partial products are added into the accumulator, so the warpgroups never wait for each
//             other.
// Q, dO and K are each laid out once and read through two views of the same bytes: a K-major view
// (rows, head dim) and an MN-major one (head dim, rows), possible because the swizzle atoms are stacked
// along the rows first in both: 128-byte atoms at D 64 and 128 (a tile is [64-column chunk][row][64]),
// 64-byte atoms at D 32, whose rows are 64 bytes (a tile is [row][32]). is_transposed_view checks it.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/fmha/fmha_backward_traits.cuh"
#include "cuda/fmha_sm90/fmha_sm90_backward_mask.cuh"
#include "cuda/fmha_sm90/fmha_sm90_dq_turns.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

namespace attnkit::cuda::fmha_sm90 {

// Whether a (rows, head dim) layout and a (head dim, rows) one put every element at the same address: the
// same swizzle of the same offsets. A layout's offset is the sum of its modes' offsets, so the two agree
// everywhere when they agree along each axis (compile-time evaluation of every element exceeds nvcc's
// constexpr budget at D 64).
template <class RowsMajor, class ColumnsMajor>
constexpr bool is_transposed_view() {
  using namespace cute;
  if constexpr (!std::is_same_v<decltype(get_swizzle_portion(RowsMajor{})),
                                decltype(get_swizzle_portion(ColumnsMajor{}))>) {
    return false;
  } else {
    constexpr auto rows = get_nonswizzle_portion(RowsMajor{});
    constexpr auto columns = get_nonswizzle_portion(ColumnsMajor{});
    if (int(size<0>(rows)) != int(size<1>(columns)) || int(size<1>(rows)) != int(size<0>(columns))) return false;
    for (int r = 0; r < int(size<0>(rows)); ++r) {
      if (rows(r, 0) != columns(0, r)) return false;
    }
    for (int c = 0; c < int(size<1>(rows)); ++c) {
      if (rows(0, c) != columns(c, 0)) return false;
    }
    return true;
  }
}

template <class Element_, int HeadDim_, int BlockN_ = 128>
struct Sm90BackwardTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "the Hopper kernels run fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128, "head dims 32, 64 and 128");
  // The width of the swizzle atoms of Q, dO, K and V: a row's bytes up to 128. Their swizzle repeats every
  // 8 rows (8 x kSwizzleBytes bytes).
  static constexpr int kSwizzleBytes = kHeadDim * int(sizeof(Element)) < 128 ? kHeadDim * int(sizeof(Element)) : 128;
  static_assert(kSwizzleBytes == 64 || kSwizzleBytes == 128, "64- or 128-byte swizzle atoms");
  // A producer and an MMA warpgroup per 64 keys: two at one CTA per SM, one at two CTAs per SM (KV tiles of 128
  // and of 64 keys). The producer gives its registers to the MMA warpgroups (setmaxnreg): 24 x 128 + 240 x 256 of
  // the 64 Ki registers with one CTA, 24 x 128 + 232 x 128 of the 256 x 128 a CTA starts with at two.
  static constexpr int kBlockM = 64;
  static constexpr int kKeysPerGroup = 64;
  static constexpr int kBlockN = BlockN_;
  static_assert(kBlockN == 128 || kBlockN == 64, "KV tiles of 128 or 64 keys");
  static constexpr int kMmaGroups = kBlockN / kKeysPerGroup;
  static constexpr int kCtasPerSm = kMmaGroups == 1 ? 2 : 1;
  static constexpr int kProducerThreads = 128;
  static constexpr int kMmaThreads = 128 * kMmaGroups;
  static constexpr int kThreads = kProducerThreads + kMmaThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kProducerRegisters = 24;
  static constexpr int kMmaRegisters = kCtasPerSm == 1 ? 240 : 232;
  static_assert(kProducerThreads * kProducerRegisters + kMmaThreads * kMmaRegisters <= 65536 / kCtasPerSm,
                "the warpgroups' registers fit the CTA's share of the register file");
  // Several KV heads per CTA in turn (FmhaBackwardParams::heads_per_cta) up to D 64: at D 128 the loop over heads
  // around the visits' loop left ptxas spilling ~0.8 KB (against 76 bytes) next to the 64 x 128 dK and dV
  // accumulators.
  static constexpr bool kSeveralHeadsPerCta = kHeadDim <= 64;
  // K / V buffers: with several KV heads per CTA head j uses buffer j % 2, so the next head's K and V load while the
  // MMA warpgroups work on this one (its outputs leave through this head's buffer).
  static constexpr int kKvBuffers = kSeveralHeadsPerCta ? 2 : 1;
  // Tile lists with an element mask: partial visits' key-major mask words go through the stage (the producer's
  // copies) at D 64, where the MMA warpgroups' global loads of them delayed the probabilities (H200, S 8192,
  // 50 % mask: dK/dV kernel 3.41 -> 2.98 ms, unmasked 2.56), and at D 32, whose accumulators are smaller; at
  // D 128 the consumers are at their register limit, the staged path's extra live values spilled and cost 1 %
  // there, so D 128 loads the words itself.
  static constexpr bool kStagedKeyWords = kHeadDim <= 64;
  // Up to D 64 the dQ product is issued as soon as dS is in shared memory, behind dV and dK on the tensor pipe, and
  // one wait covers all three: its 64 x D accumulator fits beside dK, dV and the P / dS operands. At D 128 it would
  // not (ptxas serialises the wgmmas, C7512), and the dQ product waits for dK and dV.
  static constexpr bool kDqBehindGradients = kHeadDim <= 64;
  // The portable kernels that run around this one (preprocess, tile lists, dQ kernel of the
  // deterministic mode, dQ convert) see the same tiles through this view.
  using Portable = fmha::FmhaBackwardTraits<Element, kHeadDim, kBlockM, kBlockN, 4>;

  template <class Shape, cute::GMMA::Major A, cute::GMMA::Major B>
  using SS = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<Element, Element, float, Shape, A, B>()));
  using MmaScores =
      SS<cute::Shape<cute::_64, cute::Int<kBlockM>, cute::Int<kHeadDim>>, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using MmaGrads = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kBlockM>>, cute::GMMA::Major::K,
                                 cute::GMMA::Major::MN>()));
  // Each warpgroup all head-dim columns over its own 64 keys. Splitting the head dim instead (each
  // warpgroup 64 columns over all 128 keys: half the dQ additions, but a barrier of both warpgroups per
  // visit) measured 246 against 249 TF/s on dense S8k D128 (H100, both with one warp issuing the dQ
  // reductions; docs/perf.md).
  static constexpr int kDqColumns = kHeadDim;
  static constexpr int kDqDepth = kKeysPerGroup;
  using MmaDq = SS<cute::Shape<cute::_64, cute::Int<kDqColumns>, cute::Int<kDqDepth>>, cute::GMMA::Major::MN,
                   cute::GMMA::Major::MN>;

  using RowsAtom = std::conditional_t<kSwizzleBytes == 128, cute::GMMA::Layout_K_SW128_Atom<Element>,
                                      cute::GMMA::Layout_K_SW64_Atom<Element>>;
  using ColumnsAtom = std::conditional_t<kSwizzleBytes == 128, cute::GMMA::Layout_MN_SW128_Atom<Element>,
                                         cute::GMMA::Layout_MN_SW64_Atom<Element>>;
  template <int Rows>
  using RowsMajor = decltype(cute::tile_to_shape(RowsAtom{}, cute::Shape<cute::Int<Rows>, cute::Int<kHeadDim>>{}));
  template <int Rows>
  using ColumnsMajor = decltype(cute::tile_to_shape(ColumnsAtom{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<Rows>>{},
                                                    cute::Step<cute::_2, cute::_1>{}));
  using SmemLayoutQ = RowsMajor<kBlockM>;      // Q, dO: (query, head dim)
  using SmemLayoutQt = ColumnsMajor<kBlockM>;  // the same bytes as (head dim, query)
  using SmemLayoutKV = RowsMajor<kBlockN>;     // K, V: (key, head dim)
  using SmemLayoutKt = ColumnsMajor<kBlockN>;  // K as (head dim, key)
  static_assert(is_transposed_view<SmemLayoutQ, SmemLayoutQt>() && is_transposed_view<SmemLayoutKV, SmemLayoutKt>(),
                "the MN-major views read the K-major tiles' bytes");
  // A warpgroup's dS with queries contiguous: (query, key), the MN-major A operand of MmaDq; a
  // thread's two adjacent query columns of one key row are one 32-bit store.
  using SmemLayoutDs = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<cute::Int<kBlockM>, cute::Int<kKeysPerGroup>>{}));

  // Global -> shared copies by the producer warpgroup (load_rows_async and issue_visit_loads read
  // these names): 16-byte chunks; the GMMA layouts swizzle byte addresses, so copies address the tiles
  // through tensors.
  struct ProducerCopy {
    using Element = Element_;
    static constexpr int kThreads = kProducerThreads;
    static constexpr bool kAddressSwizzle = true;
    static constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
    static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    static_assert(kRowsPerPass % 8 == 0 && kBlockM % kRowsPerPass == 0, "passes cover whole tiles");
  };
  // The dK / dV stores of the MMA warpgroups: whole 16-byte chunks.
  static constexpr int kChunksPerRow = ProducerCopy::kChunksPerRow;
  static constexpr int kStoreRowsPerPass = kMmaThreads / kChunksPerRow;

  // Fast mode's dQ, when the accumulator has a TMA map (Sm90DqMap), goes through shared memory: per MMA
  // warpgroup one fp32 tile of 64 queries x D as boxes of 32 columns (128 bytes per row, 128-byte
  // swizzled), each added to the accumulator by one TMA reduction. Without a map, threads add their
  // accumulator pairs with red.global.
  static constexpr int kDqBoxes = kDqColumns / kDqBoxColumns;
  static constexpr int kDqBoxFloats = kBlockM * kDqBoxColumns;
  static_assert(kDqColumns % kDqBoxColumns == 0, "whole dQ boxes");

  static constexpr int kTileBytesQ = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kTileBytesKV = kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kStages = 2;

  struct SharedStorage {
    alignas(1024) Element k[kKvBuffers][kBlockN * kHeadDim];
    alignas(1024) Element v[kKvBuffers][kBlockN * kHeadDim];
    alignas(1024) Element q[kStages][kBlockM * kHeadDim];
    alignas(1024) Element d_o[kStages][kBlockM * kHeadDim];
    alignas(1024) Element ds[kMmaGroups][kBlockM * kKeysPerGroup];
    alignas(1024) float dq[kMmaGroups][kBlockM * kDqColumns];
    alignas(16) float stats[kStages][2 * kBlockM];
    // Partial visits' element masks: box policies' tables (built once per CTA), or, for tile lists with an
    // element mask, each stage's key-major mask words (the visit's kBlockM queries of each of the tile's keys,
    // copied by the producer with the visit).
    union VisitMasks {
      BoxMaskTables<kBlockN, kBlockM> box;
      uint32_t key_words[kStages][kBlockN][kBlockM / 32];
    };
    alignas(16) VisitMasks masks;
    alignas(16) int64_t dq_rows[kStages][kBlockM];
    fmha::QVisit visits[kStages];
    fmha::QVisit visits_ahead[kStages];              // producer: a visit prepared before its stage is free
    int32_t dq_box[kMmaGroups][5];                   // a warpgroup's current dQ box coordinates (its issuing thread's)
    DqTurn dq_turn[kMmaGroups];                      // ordered dQ: a warpgroup's current turn (its turn thread's)
    const Element* row_table[kStages][2 * kBlockM];  // producer: Q then dO row starts of a visit
    const Element* kv_rows[2 * kBlockN];             // producer: K then V row starts of a KV head's tile
    uint64_t kv_full[kKvBuffers];                    // K and V of a KV head landed in the buffer
    uint64_t kv_empty[kKvBuffers];  // the MMA warpgroups stored a KV head's dK and dV (the buffer is free again)
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + 1024;  // + alignment of the dynamic base
  static_assert(kSmemBytes <= 227 * 1024, "an SM90 CTA has at most 227 KiB of shared memory");
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "kCtasPerSm CTAs share an SM's 228 KiB");
};

}  // namespace attnkit::cuda::fmha_sm90
