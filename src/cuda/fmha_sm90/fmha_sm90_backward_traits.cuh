// Compile-time shape of one Hopper backward dK/dV instantiation (fmha_sm90_backward_dkdv.cuh): element
// type, compiled head dim, tiles (BlockM = 64 queries per visit, BlockN = 128 keys: 64 per warpgroup),
// the warpgroup MMAs and the shared-memory layouts.
//
// Warpgroup w owns keys 64w .. 64w + 63 of the KV tile. Every product is one wgmma shape per
// warpgroup:
//   MmaScores (SS, 64 keys x 64 queries x D):  S^T = K Q^T and dP^T = V dO^T (both K-major);
//   MmaGrads  (RS, 64 keys x D x 64 queries):  dV += P^T dO and dK += dS^T Q, P^T and dS^T from the
//             score accumulators' registers, dO and Q read MN-major (their rows are the reduction);
//   MmaDq     (SS, 64 queries x 64 columns x kDqDepth keys, both MN-major): fast mode's dQ = dS K from
//             a query-major dS tile and the K tile. D = 128 splits the head dim between the warpgroups
//             (each reduces over all 128 keys); D = 64 splits the keys (each reduces over its own 64,
//             both add into the same dQ columns).
// Q, dO and K are each laid out once and read through two views of the same bytes: a K-major view
// (rows, head dim) and an MN-major one (head dim, rows), possible because 128-byte swizzle atoms are
// stacked along the rows first in both (a tile is [64-column chunk][row][64]).
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

#include "cuda/fmha/fmha_backward_traits.cuh"

namespace attnkit::cuda::fmha_sm90 {

template <class Element_, int HeadDim_>
struct Sm90BackwardTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "the Hopper kernels run fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "128-byte swizzled rows: head dims 64 and 128");
  // Two warpgroups of 64 keys, one CTA per SM (255 registers per thread). One warpgroup per CTA and two
  // CTAs per SM ran slower on H100 (dense S8k D128 155 vs 225 TF/s: twice the dQ atomics; docs/perf.md).
  static constexpr int kGroups = 2;
  static constexpr int kBlockM = 64;
  static constexpr int kKeysPerGroup = 64;
  static constexpr int kBlockN = kKeysPerGroup * kGroups;
  static constexpr int kThreads = 128 * kGroups;
  static constexpr int kWarps = kThreads / 32;
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
  // D = 128: each warpgroup 64 of the head-dim columns over all 128 keys (splitting the keys instead,
  // with twice the atomics, measured 190 vs 225 TF/s); D = 64: all columns over its own 64 keys.
  static constexpr bool kDqSplitsHeadDim = kHeadDim == 128;
  static constexpr int kDqColumns = 64;
  static constexpr int kDqDepth = kDqSplitsHeadDim ? kBlockN : kKeysPerGroup;
  using MmaDq = SS<cute::Shape<cute::_64, cute::Int<kDqColumns>, cute::Int<kDqDepth>>, cute::GMMA::Major::MN,
                   cute::GMMA::Major::MN>;

  template <int Rows>
  using RowsMajor = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                 cute::Shape<cute::Int<Rows>, cute::Int<kHeadDim>>{}));
  template <int Rows>
  using ColumnsMajor = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<cute::Int<kHeadDim>, cute::Int<Rows>>{},
                                                    cute::Step<cute::_2, cute::_1>{}));
  using SmemLayoutQ = RowsMajor<kBlockM>;      // Q, dO: (query, head dim)
  using SmemLayoutQt = ColumnsMajor<kBlockM>;  // the same bytes as (head dim, query)
  using SmemLayoutKV = RowsMajor<kBlockN>;     // K, V: (key, head dim)
  using SmemLayoutKt = ColumnsMajor<kBlockN>;  // K as (head dim, key)
  // dS with queries contiguous: (query, key), the MN-major A operand of MmaDq; a thread's two adjacent
  // query columns of one key row are one 32-bit store.
  using SmemLayoutDs = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                    cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>>{}));

  // Global -> shared copies (load_rows_async reads these names): 16-byte chunks over all threads; the
  // GMMA layouts swizzle byte addresses, so copies address the tiles through tensors.
  static constexpr bool kAddressSwizzle = true;
  static constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && kBlockM % kRowsPerPass == 0, "passes cover whole tiles");

  static constexpr int kTileBytesQ = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kTileBytesKV = kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kTileBytesDs = kBlockM * kBlockN * int(sizeof(Element));
  static constexpr int kStages = 2;

  struct SharedStorage {
    alignas(1024) Element k[kBlockN * kHeadDim];
    alignas(1024) Element v[kBlockN * kHeadDim];
    alignas(1024) Element q[kStages][kBlockM * kHeadDim];
    alignas(1024) Element d_o[kStages][kBlockM * kHeadDim];
    alignas(1024) Element ds[2][kBlockM * kBlockN];  // fast mode, by visit parity
    alignas(16) float stats[kStages][2 * kBlockM];
    alignas(16) int2 windows[kStages][fmha::kMaxDims * kBlockM];
    alignas(16) int64_t dq_rows[kStages][kBlockM];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage)) + 1024;  // + alignment of the dynamic base
};

}  // namespace attnkit::cuda::fmha_sm90
