// Compile-time shape of one instance of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh):
// element type, key dim D, value block E, the warpgroup MMAs, the shared-memory layouts and the shared storage.
//
// Every tile is stored in 128-byte swizzled rows (the GMMA SW128 atoms), so that one buffer serves as a K-major and
// an MN-major operand: a chunk's K tile, 64 token rows of D elements in chunks of 64 columns, is K for Q K^T
// (N = keys, K-major) and, read transposed, K^T for the state update (M = D, MN-major A: the SW128 K-major atom
// read as (column, row) is the MN-major atom). V, the scaled copy of V and the 16-bit state tile are MN-major B
// operands: one 128-byte row per token (V) or per state row (S), E = 64 columns wide.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attnkit::cuda::retention {

template <class Element_, int HeadDim_, int ValueBlock_>
struct WgmmaChunkTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "wgmma runs fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kValueBlock = ValueBlock_;
  static constexpr int kChunk = 64;
  static constexpr int kStages = 2;
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kThreads = 3 * kWarpgroupThreads;  // producer, output, state
  static constexpr int kMinBlocksPerSm = 2;
  // Registers per thread after setmaxnreg. Two CTAs of 384 threads start at 80 each (the launch bound); the
  // producer gives some back so the output and state warpgroups may grow: 32 + 2 x 104 <= 3 x 80 (ptxas -v, bf16:
  // 44 bytes of spill stores at D = 128, 12 at D = 64; at 40 + 2 x 96 the output warpgroup spilled 180).
  static constexpr int kProducerRegisters = 32;
  static constexpr int kConsumerRegisters = 104;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the state's rows are whole m64 tiles; rows of 128-byte chunks");
  static_assert(kValueBlock == 64, "a V row, a scaled V row and a state row are one 128-byte swizzled row");

  using AtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;    // 8 rows x 64 contiguous columns
  using AtomMN = cute::GMMA::Layout_MN_SW128_Atom<Element>;  // 64 contiguous rows x 8 columns: AtomK transposed
  // Q and K as (token, d, stage): the A operand of Q K^T and Q S, the B operand of Q K^T.
  using LayoutQK =
      decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kChunk>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // The same K bytes as (d, token, stage): the MN-major A operand K^T of the state update.
  using LayoutKt =
      decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<kChunk>, cute::Int<kStages>>{},
                                   cute::Step<cute::_2, cute::_1, cute::_3>{}));
  // V as (e, token, stage): the MN-major B operand of P V; its scaled copy (e, token) that of the state update.
  using LayoutV = decltype(cute::tile_to_shape(
      AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kChunk>, cute::Int<kStages>>{},
      cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using LayoutVScaled = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kChunk>>{},
                                                     cute::Step<cute::_2, cute::_1>{}));
  // One stage of each: what the consumers build their operand descriptors on, chunk by chunk.
  using LayoutQKStage = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kChunk>, cute::Int<kHeadDim>>{}));
  using LayoutKtStage = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kHeadDim>, cute::Int<kChunk>>{},
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
  // State update K'^T V~: m(D) nE k64 (D / 64 m64 tiles), both operands MN-major.
  using MmaStateUpdate = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kValueBlock>, cute::_64>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));

  static constexpr int kVStageElements = kValueBlock * kChunk;

  struct SharedStorage {
    alignas(1024) Element q[cute::cosize_v<LayoutQK>];
    alignas(1024) Element k[cute::cosize_v<LayoutQK>];
    alignas(1024) Element v[cute::cosize_v<LayoutV>];
    alignas(1024) Element v_scaled[cute::cosize_v<LayoutVScaled>];
    alignas(1024) Element state[cute::cosize_v<LayoutState>];
    uint64_t full[kStages];   // a stage's Q, K, V have landed (producer -> output and state warpgroups)
    uint64_t empty[kStages];  // both consumers are done with a stage (-> producer)
    uint64_t state_ready;     // the state tile holds the state before the output warpgroup's next chunk
    uint64_t state_free;      // the output warpgroup's Q S has read the state tile
  };
  static constexpr int kSharedBytes = int(sizeof(SharedStorage));
  static_assert(2 * (kSharedBytes + 1024) <= 228 * 1024, "two CTAs per SM90 multiprocessor");
};

}  // namespace attnkit::cuda::retention
