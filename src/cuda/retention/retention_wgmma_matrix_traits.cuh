// Compile-time shape of one instance of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh): element
// type, key dim D, value block E (the value columns one CTA owns), the roles' registers, the load ring and the shared
// storage.
//
// Q (128 rows), K (64 keys a stage) and V are stored in 128-byte swizzled rows (the GMMA SW128 atoms, as in
// retention_wgmma_chunk_traits.cuh): Q and K as K-major operands of Q K^T, V as the MN-major B operand of P V. A stage
// of the matrix is what its TMA boxes write with the 128-byte swizzle: rows of 128 bytes, 16-byte piece c of row r at
// position c ^ (r % 8); float32 entries in two 16 KiB halves of 128 rows x 32 keys, 16-bit entries in one half of 128
// rows x 64 keys. A warp's reads of its accumulator positions (8 rows, 4 lanes a row) touch every bank once (16-bit)
// or twice (float32: 256 bytes, the least).
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
struct WgmmaMatrixTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "wgmma runs fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kValueBlock = ValueBlock_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "rows of 128-byte pieces, one m64nNk16 chain");
  static_assert(kValueBlock == 64 || kValueBlock == 128, "an m64nE accumulator of at most 64 values a thread");
  static constexpr int kQueryRows = 128;  // a CTA's query rows: two consumer warpgroups of 64
  static constexpr int kKeys = 64;        // keys a block
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumers = 2;
  // CTAs of a cluster (a launch's choice, matrix_cluster_size): batches b, b + 1, ... of one (head, query block, value
  // slice), each CTA's producer loading its share of every matrix tile's rows into all of them (TMA multicast).
  static constexpr int kMaxClusterSize = 4;
  static_assert(kQueryRows / kMaxClusterSize % 8 == 0, "each CTA's share of a tile is whole 8-row swizzle atoms");
  static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // the producer first
  // Registers after setmaxnreg (the launch gives 168 a thread): a consumer holds O (E / 2 fp32), the scores (32), P
  // (16) and the 32 matrix entries of its scores.
  static constexpr int kProducerRegisters = 40;
  static constexpr int kConsumerRegisters = 232;
  static_assert(kProducerRegisters + kConsumers * kConsumerRegisters <= (65536 / kThreads / 8 * 8) * (1 + kConsumers),
                "the roles' registers fit the launch's");

  // The load ring: a stage holds a nonzero block's 128 x 64 tile of the matrix, its K and its V; as many stages as the
  // shared memory holds beside Q, at most 4 (Dk = Dv = 128: 3 stages of 64 KiB).
  static constexpr int kMatrixStageBytes = kQueryRows * 256;
  static constexpr int kMatrixHalfBytes = kMatrixStageBytes / 2;  // float32: 32 keys of the 128 rows
  static constexpr int kQBytes = kQueryRows * kHeadDim * 2;
  static constexpr int kKStageBytes = kKeys * kHeadDim * 2;
  static constexpr int kVStageBytes = kKeys * kValueBlock * 2;
  static constexpr int kStageBytes = kMatrixStageBytes + kKStageBytes + kVStageBytes;
  static constexpr int kBarrierBytes = 1024;
  static constexpr int kRoom = kMaxSharedBytesPerBlock - kBarrierBytes - kQBytes;
  static constexpr int kStages = kRoom / kStageBytes < 4 ? kRoom / kStageBytes : 4;
  static_assert(kStages >= 3, "two stages loading while the consumers read a third");

  using AtomK = cute::GMMA::Layout_K_SW128_Atom<Element>;    // 8 rows x 64 contiguous columns
  using AtomMN = cute::GMMA::Layout_MN_SW128_Atom<Element>;  // 64 contiguous rows x 8 columns
  // Q as (query, d): 64-column blocks of 128 rows each.
  using LayoutQ = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kQueryRows>, cute::Int<kHeadDim>>{}));
  // One stage of K as (key, d), of V as (e, key).
  using LayoutKStage = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kKeys>, cute::Int<kHeadDim>>{}));
  using LayoutVStage = decltype(cute::tile_to_shape(AtomMN{}, cute::Shape<cute::Int<kValueBlock>, cute::Int<kKeys>>{},
                                                    cute::Step<cute::_2, cute::_1>{}));
  static constexpr int kKStageElements = kKeys * kHeadDim;
  static constexpr int kVStageElements = kKeys * kValueBlock;

  // Scores Q K^T: m64 n64 k(D), both from shared memory, K-major.
  using MmaScores = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::_64, cute::Int<kHeadDim>>>()));
  // P V: m64 nE k64, P from registers, V MN-major.
  using MmaValues = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kValueBlock>, cute::_64>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  struct SharedStorage {
    alignas(1024) Element q[cute::cosize_v<LayoutQ>];
    alignas(1024) Element k[kStages][kKStageElements];
    alignas(1024) Element v[kStages][kVStageElements];
    alignas(1024) unsigned char matrix[kStages][kMatrixStageBytes];
    uint64_t q_full;          // Q has landed (producer -> consumers)
    uint64_t full[kStages];   // a stage's tile, K and V have landed
    uint64_t empty[kStages];  // the consumers are done with a stage (-> producer)
  };
  static constexpr int kSharedBytes = int(sizeof(SharedStorage));
  static_assert(kSharedBytes <= kMaxSharedBytesPerBlock, "an SM90 CTA's opt-in shared memory");
};

}  // namespace attnkit::cuda::retention
