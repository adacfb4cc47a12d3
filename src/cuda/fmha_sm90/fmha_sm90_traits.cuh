// Compile-time shape of one Hopper forward kernel instantiation (fmha_sm90_kernel.cuh): element type,
// compiled head dim, tile sizes, the warpgroup MMAs, the shared-memory layouts and the shared storage.
//
// A CTA has a producer warpgroup (loads) and one consumer warpgroup per 64 of its BlockM = 192, 128 or 64 query
// rows (192: three consumer warpgroups taking turns, up to D 64, for dense, causal and 1-D neighborhood masks; its
// query tiles are not a power of two, which boxes of several dimensions need). Q*K^T is a wgmma with both operands in
// shared memory (K-major, swizzled); P*V takes P from registers and V from shared memory, read MN-major (V's rows are
// keys, its contiguous columns the head dim). Rows are stored in chunks of min(D, 64) columns: 128-byte swizzled chunks
// of 64 columns at D 64 and 128, one 64-byte swizzled chunk at D 32 (what one TMA box writes with the same swizzle). K
// and V have kStages buffers each. The mask policies of the portable tier are reused unchanged through PolicyTraits:
// the thread -> (row, column) map of a consumer warpgroup's m64nN wgmma accumulator is the one of an 8-warp mma.sync
// tile of 128 x BlockN (warp w holds rows 16w + lane/4 (+8), columns 8j + 2 (lane % 4) (+1)), so masks, tile-list bits
// and their preprocessing are shared.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/fmha/fmha_traits.cuh"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"

namespace attnkit::cuda::fmha_sm90 {

template <class Element_, int HeadDim_, int BlockM_, int BlockN_>
struct Sm90FmhaTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "the Hopper kernels run fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kBlockM = BlockM_;
  static constexpr int kBlockN = BlockN_;
  static_assert(kBlockM == 128 || (kBlockM == 64 && kBlockN == 64) ||
                    (kBlockM == 192 && kBlockN == 128 && kHeadDim <= 64),
                "128 query rows (two consumer warpgroups), 64 (one) with 64-key tiles, or 192 (three) with 128-key "
                "tiles up to D 64");
  // Query tiles of a power of two rows: the box masks' tiles. Others (192) serve flat query sides only.
  static constexpr bool kPowerOfTwoRows = (kBlockM & (kBlockM - 1)) == 0;
  static constexpr int kStages = 2;
  static constexpr int kRowsPerConsumer = 64;
  static constexpr int kConsumerGroups = kBlockM / kRowsPerConsumer;
  static constexpr int kConsumerThreads = 128 * kConsumerGroups;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kWarps = kThreads / 32;
  // CTAs resident per SM: two for the kernels of 128 query rows and 64-key tiles up to D 64 (one CTA's setup,
  // epilogue and softmax latency overlap the other's products); for those of 64 query rows four up to D 64 (the same
  // four consumer warpgroups per SM, each CTA with query boxes half as large) and two at D 128 (whose O accumulator
  // needs more than the 104 registers four CTAs leave a consumer); else one.
  static constexpr int kCtasPerSm = kBlockM == 64                       ? (kHeadDim <= 64 ? 4 : 2)
                                    : (kHeadDim <= 64 && kBlockN == 64) ? 2
                                                                        : 1;
  // Registers per thread after setmaxnreg: 128 x 96 + 256 x 200 <= 64K with one CTA per SM. ptxas allocates each
  // region to its limit: at 40 the producer's copy loop spilled (docs/perf.md), at 96 nothing spills. Three consumer
  // warpgroups: 128 x 32 + 384 x 160 = 64K (S, P and O of 64 rows at D 64 take 128). Several CTAs per SM start at
  // the launch bound's share and trade within the CTA: two of 128 rows 128 x 24 + 256 x 104 <= 384 x 80, four of 64
  // rows 128 x 24 + 128 x 104 <= 256 x 64, two of 64 rows 128 x 24 + 128 x 232 <= 256 x 128.
  static constexpr int kProducerRegisters = kCtasPerSm > 1 ? 24 : kConsumerGroups == 3 ? 32 : 96;
  static constexpr int kConsumerRegisters = kCtasPerSm == 1                      ? (kConsumerGroups == 3 ? 160 : 200)
                                            : (kBlockM == 64 && kCtasPerSm == 2) ? 232
                                                                                 : 104;
  // Whether a consumer's exponentials of S(i) run while its P(i-1) * V(i-1) is still in the tensor cores. That keeps
  // S(i), P(i-1) and O live at once: at D 64 and 104 registers ptxas spilled ~370 bytes, so there a consumer runs
  // serial turns (Sm90Consumer::serial_turns) and relies on the other warpgroups on the SM for overlap.
  static constexpr bool kSoftmaxOverlapsPv = kConsumerRegisters >= 160 || kHeadDim == 32;
  static_assert(kProducerThreads * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= 65536 / kCtasPerSm,
                "the warpgroups' registers fit the CTA's share of the register file");
  static_assert(kHeadDim == 32 || kHeadDim == 64 || kHeadDim == 128,
                "swizzled row chunks of 64 bytes (D 32) or 128 bytes (D 64, 128)");
  static_assert(kBlockN == 128 || kBlockN == 64, "a producer thread owns one K row and one V row per tile");

  // The portable tier's view of the same tile (warps of 16 query rows), for the mask policies and the tile-list
  // preprocessing.
  using PolicyTraits = fmha::FmhaTraits<Element, kHeadDim, kBlockM, kBlockN, kBlockM / 16>;
  static_assert(PolicyTraits::kThreads == kConsumerThreads && PolicyTraits::kRows == 2, "policy view");

  using MmaS = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<kHeadDim>>>()));
  using MmaO = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kBlockN>>, cute::GMMA::Major::K,
                                 cute::GMMA::Major::MN>()));

  // One chunk of a row: 64 columns (128 bytes) or the whole row at D 32 (64 bytes), and its swizzle atoms.
  static constexpr int kChunkColumns = kHeadDim < 64 ? kHeadDim : 64;
  using AtomK = std::conditional_t<kChunkColumns == 64, cute::GMMA::Layout_K_SW128_Atom<Element>,
                                   cute::GMMA::Layout_K_SW64_Atom<Element>>;
  using AtomMN = std::conditional_t<kChunkColumns == 64, cute::GMMA::Layout_MN_SW128_Atom<Element>,
                                    cute::GMMA::Layout_MN_SW64_Atom<Element>>;

  using SmemLayoutQ = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(
      AtomK{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // V as (head dim, key, stage): the B operand of P*V, head dim contiguous. Atoms are stacked along the
  // keys first, so a stage holds column chunks of BlockN key rows — the same bytes as a K stage, and
  // what a TMA box of kChunkColumns columns x BlockN rows writes.
  using SmemLayoutVt =
      decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                   cute::Step<cute::_2, cute::_1, cute::_3>{}));
  // Heads one CTA may run in turn (FmhaParams::heads_per_cta): at D 128 the head loop's extra live values
  // push the 128-row kernels' consumers past their 200 registers (spills), so those run one head per CTA; the
  // 64-row kernel's one consumer warpgroup has 232.
  static constexpr bool kSeveralHeadsPerCta = kHeadDim <= kSeveralHeadsMaxHeadDim || kBlockM == 64;
  // Q buffers: with several heads per CTA head j uses buffer j % 2, so the next head's Q lands while the
  // consumers finish the current one (its epilogue stages O through the current buffer).
  static constexpr int kQBuffers = kSeveralHeadsPerCta ? 2 : 1;
  static constexpr int kTileBytes = kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kQTileBytes = kBlockM * kHeadDim * int(sizeof(Element));

  // Global -> shared: 16-byte chunks, kChunksPerRow per row.
  static constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
  static constexpr int kElementsPerChunk = 16 / int(sizeof(Element));

  struct SharedStorage {
    alignas(1024) Element q[kQBuffers][cute::cosize_v<SmemLayoutQ>];  // reused for O
    alignas(1024) Element k[cute::cosize_v<SmemLayoutK>];
    alignas(1024) Element v[cute::cosize_v<SmemLayoutVt>];
    alignas(16) char policy[PolicyTraits::kWindowBytes + PolicyTraits::kPrefixBytes];
    alignas(16) char policy_state[PolicyTraits::kStateBytes];
    const Element* rows[kStages][2][kBlockN];  // K and V row starts of the tile in each stage
    uint64_t q_full[kQBuffers];
    uint64_t q_empty[kQBuffers];  // the consumers are done with a Q buffer (their epilogue's O staging)
    uint64_t k_full[kStages];
    uint64_t v_full[kStages];
    uint64_t k_empty[kStages];
    uint64_t v_empty[kStages];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "kCtasPerSm CTAs, each with the 1 KiB the system reserves, share an SM's 228 KiB of shared memory");
};

}  // namespace attnkit::cuda::fmha_sm90
