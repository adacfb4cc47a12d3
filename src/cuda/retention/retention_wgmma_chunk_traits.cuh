// Compile-time shape of one instance of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh):
// element type, key dim D, value block E, the roles' warpgroups and registers, the load stages, the warpgroup MMAs,
// the shared-memory layouts and the shared storage.
//
// Every tile is stored in 128-byte swizzled rows (the GMMA SW128 atoms), so that one buffer serves as a K-major and
// an MN-major operand: a chunk's K tile, 64 token rows of D elements in blocks of 64 columns, is K for Q K^T
// (N = keys, K-major) and, read transposed, K^T for the state update (M = D, MN-major A: the SW128 K-major atom
// read as (column, row) is the MN-major atom). V, the scaled copy of V and the 16-bit state tile are MN-major B
// operands: one 128-byte row per token (V) or per state row (S) and 64-column block, E / 64 blocks.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element_, int HeadDim_, int ValueBlock_>
struct WgmmaChunkTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "wgmma runs fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kValueBlock = ValueBlock_;
  static constexpr int kChunk = 64;
  static constexpr int kWarpgroupThreads = 128;
  // E = 64: one state warpgroup holds S [D, 64] (D / 64 m64n64 tiles); one CTA per multiprocessor at D = 64, two at
  // D = 128. E = 128 (D = 128 only): two state warpgroups hold 64 rows of S [128, 128] each (one m64n128 tile, 64 fp32
  // values a thread), one CTA per multiprocessor.
  static constexpr int kStateWarpgroups = kValueBlock / 64;
  static constexpr int kStateRows = kHeadDim / kStateWarpgroups;  // rows of S one state warpgroup holds
  static constexpr int kMinBlocksPerSm = kValueBlock == 64 && kHeadDim == 128 ? 2 : 1;
  // At D = 64 (E = 64, one CTA a multiprocessor) the output warpgroups' work sets the pace: two output warpgroups
  // take alternate chunks, each with its own 16-bit state tile and output-rows tile, and each keeps its 32 values of
  // the chunk's decay mask (scale * gamma^(i - j), 0 above the diagonal) in registers across the chunk loop instead of
  // 32 exponentials a chunk (kHoldDecay).
  static constexpr int kOutputWarpgroups = kMinBlocksPerSm == 1 && kValueBlock == 64 ? 2 : 1;
  static constexpr bool kHoldDecay = kMinBlocksPerSm == 1 && kValueBlock == 64;
  // With two output warpgroups, the output warpgroup of chunk c also scales its V for the state update (into its own
  // scaled-V tile, announced on values_scaled, released on values_free), so that the state warpgroup's chain per chunk
  // is the update and the state tile's round trip alone (measured on an H200: the D = 64 backward kernels 4-6 % faster,
  // forwards within -4 % / +2 %; docs/perf.md, retention "Nineteenth step"). Elsewhere, and in the state-only launch,
  // the state warpgroups scale V into tile 0 themselves.
  static constexpr bool kOutputsScaleValues = kOutputWarpgroups == 2;
  static constexpr int kScaledValueTiles = kOutputsScaleValues ? kOutputWarpgroups : 1;
  static constexpr int kThreads = (1 + kOutputWarpgroups + kStateWarpgroups) * kWarpgroupThreads;  // producer first
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the state's rows are whole m64 tiles; rows of 128-byte chunks");
  static_assert(kValueBlock == 64 || (kValueBlock == 128 && kHeadDim == 128),
                "value blocks of 64 columns; 128 at D = 128 (two state warpgroups of one m64 tile each)");
  // Registers per thread after setmaxnreg; the launch gives 65536 / (kMinBlocksPerSm x kThreads) each (128 at D = 64
  // and at E = 128, 80 at D = 128 and E = 64) and the producer gives some back. D = 64: 40 + 2 x 168 + 136 <= 4 x 128:
  // an output warpgroup holds O (32 fp32), the scores (32), P (16) and the decay mask (32), the state warpgroup S (32)
  // and its scaled V pieces. D = 128, E = 64: 32 + 2 x 104 <= 3 x 80 (at 40 + 2 x 96 the output warpgroup spilled).
  // E = 128: 48 + 176 + 2 x 144 <= 4 x 128: the output warpgroup holds O (64 fp32), the scores (32) and P (16), a state
  // warpgroup its 64 values of S and 4 scaled V pieces (16 registers); ptxas -v (bf16) spills 20 bytes, outside the
  // chunk loops of the output and state warpgroups (at 40 + 216 + 2 x 128: 104 bytes).
  static constexpr int kProducerRegisters = kValueBlock == 128 ? 48 : kMinBlocksPerSm == 1 ? 40 : 32;
  static constexpr int kOutputRegisters = kValueBlock == 128 ? 176 : kMinBlocksPerSm == 1 ? 168 : 104;
  static constexpr int kStateRegisters = kValueBlock == 128 ? 144 : kMinBlocksPerSm == 1 ? 136 : 104;
  static_assert(kProducerRegisters + kOutputWarpgroups * kOutputRegisters + kStateWarpgroups * kStateRegisters <=
                    (65536 / kMinBlocksPerSm / kThreads) * (1 + kOutputWarpgroups + kStateWarpgroups),
                "the roles' registers fit the launch's");
  // Load stages: as many as the shared memory of kMinBlocksPerSm CTAs allows, at most kMaxStages (D = 64: 5, D = 128
  // and E = 64: 2, E = 128: 3). Bytes per stage: Q, K 64 x D and V 64 x E; besides the stages: 64 x E a scaled-V
  // tile, per output warpgroup the output rows 64 x E and the state tile D x E, and 1 KiB of barriers (the storage's
  // 1024-byte alignment).
  static constexpr int kStageBytes = kChunk * (2 * kHeadDim + kValueBlock) * 2;
  static constexpr int kFixedBytes =
      (kScaledValueTiles * kChunk + kOutputWarpgroups * (kChunk + kHeadDim)) * kValueBlock * 2 + 1024;
  static constexpr int kCtaBytes = kSm90SharedBytesPerSm / kMinBlocksPerSm - kReservedSharedBytesPerCta;
  // Two output warpgroups hold two stages between them while the state warpgroup reads the older one, so the ring
  // needs more stages for the same load lookahead: at D = 64 five (measured on an H200: 5 and 6 stages alike, up to
  // 9 % faster than 3; docs/perf.md, retention "Eighteenth step").
  static constexpr int kMaxStages = kOutputWarpgroups == 2 ? 5 : 3;
  static constexpr int kStages =
      (kCtaBytes - kFixedBytes) / kStageBytes < kMaxStages ? (kCtaBytes - kFixedBytes) / kStageBytes : kMaxStages;
  static_assert(kStages >= kOutputWarpgroups + 1, "a stage loading while each output warpgroup has its own");

  using AtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;    // 8 rows x 64 contiguous columns
  using AtomMN = cute::GMMA::Layout_MN_SW128_Atom<Element>;  // 64 contiguous rows x 8 columns: AtomK transposed
  // Q and K as (token, d, stage): the A operand of Q K^T and Q S, the B operand of Q K^T.
  using LayoutQK =
      decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kChunk>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // V as (e, token, stage): the MN-major B operand of P V; its scaled copy (e, token) that of the state update.
  using LayoutV = decltype(cute::tile_to_shape(
      AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kChunk>, cute::Int<kStages>>{},
      cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using LayoutVScaled = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kChunk>>{},
                                                     cute::Step<cute::_2, cute::_1>{}));
  // One stage of each: what the consumers build their operand descriptors on, chunk by chunk. The K tile read as K^T
  // (d, token) by a state warpgroup: its rows d in [kStateRows w, kStateRows (w + 1)) are whole 64-column blocks of
  // the K tile, kStateRows x kChunk elements apart.
  using LayoutQKStage = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kChunk>, cute::Int<kHeadDim>>{}));
  using LayoutKtRows = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kStateRows>, cute::Int<kChunk>>{},
                                                    cute::Step<cute::_2, cute::_1>{}));
  using LayoutVStage = LayoutVScaled;
  static constexpr int kQkStageElements = kChunk * kHeadDim;
  // The 16-bit state as (e, d): the MN-major B operand of Q S.
  using LayoutState = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kHeadDim>>{},
                                                   cute::Step<cute::_2, cute::_1>{}));

  // Scores Q K^T: m64 n64 k(D), both from shared memory, K-major.
  using MmaScores = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::_64, cute::Int<kHeadDim>>>()));
  // Q S: m64 nE k(D), the state tile MN-major.
  using MmaQueryState = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kValueBlock>, cute::Int<kHeadDim>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  // P V: m64 nE k64, P from registers, V MN-major.
  using MmaProbabilityValues = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kValueBlock>, cute::_64>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  // State update K'^T V~ of a state warpgroup's rows: m(kStateRows) nE k64 (kStateRows / 64 m64 tiles), both operands
  // MN-major.
  using MmaStateUpdate = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kValueBlock>, cute::_64>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));

  static constexpr int kVStageElements = kValueBlock * kChunk;

  struct SharedStorage {
    alignas(1024) Element q[cute::cosize_v<LayoutQK>];
    alignas(1024) Element k[cute::cosize_v<LayoutQK>];
    alignas(1024) Element v[cute::cosize_v<LayoutV>];
    alignas(1024) Element v_scaled[kScaledValueTiles][cute::cosize_v<LayoutVScaled>];
    // Output warpgroup o's state tile: the state before chunks o, o + kOutputWarpgroups, ...
    alignas(1024) Element state[kOutputWarpgroups][cute::cosize_v<LayoutState>];
    // An output warpgroup's chunk's output rows (E / 64 blocks of 64 rows of 128 swizzled bytes) between its
    // accumulators and its 16-byte global stores.
    alignas(1024) Element out_rows[kOutputWarpgroups][kChunk * kValueBlock];
    uint64_t full[kStages];  // a stage's Q, K, V have landed (producer -> output and state warpgroups)
    uint64_t
        empty[kStages];  // the chunk's output warpgroup and the state warpgroups are done with a stage (-> producer)
    uint64_t state_ready[kOutputWarpgroups];    // state tile o holds the state before output warpgroup o's next chunk
    uint64_t state_free[kOutputWarpgroups];     // output warpgroup o's Q S has read its state tile
    uint64_t values_scaled[kOutputWarpgroups];  // kOutputsScaleValues: scaled-V tile o holds output o's chunk's
    uint64_t values_free[kOutputWarpgroups];    // kOutputsScaleValues: the state update has read scaled-V tile o
  };
  static constexpr int kSharedBytes = int(sizeof(SharedStorage));
  static_assert(resident_ctas(kSharedBytes) >= kMinBlocksPerSm, "kMinBlocksPerSm CTAs per SM90 multiprocessor");
  static_assert(kSharedBytes <= kMaxSharedBytesPerBlock, "an SM90 CTA's opt-in shared memory");
};

}  // namespace attnkit::cuda::retention
