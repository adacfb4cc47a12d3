// Compile-time shape of one forward kernel instantiation: element type, compiled head dim, tile sizes,
// warps, the tensor-core MMA, the swizzled shared-memory layouts and the shared-memory budget.
//
// Warps split the BlockM query rows (16 rows per warp per MMA row block), so every row reduction of the
// softmax stays inside one warp (a quad of lanes shares a row). Shared tiles are row-major with
// 16-byte chunks XOR-swizzled by the row index (Swizzle<3,3,3> over 8x64-element atoms, <2,3,3> over
// 8x32 for 32-wide rows), which makes both the cp.async writes and the ldmatrix reads of eight
// consecutive rows hit distinct banks. V is read transposed with ldmatrix.trans for the P*V product.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attnkit::cuda::fmha {

template <class Element_, int HeadDim_, int BlockM_, int BlockN_, int Warps_>
struct FmhaTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "the portable kernels run fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kBlockM = BlockM_;
  static constexpr int kBlockN = BlockN_;
  static constexpr int kWarps = Warps_;
  static constexpr int kThreads = kWarps * 32;
  // CTAs per SM the register budget is cut for: 32 query rows per warp need ~255 registers per thread
  // (two CTAs of four warps fill the 64K registers), 16 rows per warp fit in ~168.
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMinCtasPerSm = ((kRowsPerWarp >= 32 ? 8 : 12) / kWarps) > 0
                                           ? (kRowsPerWarp >= 32 ? 8 : 12) / kWarps
                                           : 1;
  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0 && kBlockM % (16 * kWarps) == 0, "tile shape");

  using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>, cute::SM80_16x8x16_F32F16F16F32_TN,
                                   cute::SM80_16x8x16_F32BF16BF16F32_TN>;
  using TiledMma =
      cute::TiledMMA<cute::MMA_Atom<MmaOp>, cute::Layout<cute::Shape<cute::Int<kWarps>, cute::_1, cute::_1>>,
                     cute::Tile<cute::Int<16 * kWarps>, cute::_16, cute::_16>>;

  // Per-thread share of a BlockM x BlockN score tile: kRows rows x kCols columns.
  static constexpr int kRows = 2 * (kBlockM / (16 * kWarps));
  static constexpr int kCols = 2 * (kBlockN / 8);
  static_assert(kCols <= 32, "a thread's columns of a score tile must fit one 32-bit mask");
  static constexpr int kBitWords = (kRows * kCols + 31) / 32;  // tile-list element bits per thread

  static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzleBits = kSwizzleCols == 64 ? 3 : 2;
  using SmemAtom = decltype(cute::composition(
      cute::Swizzle<kSwizzleBits, 3, 3>{},
      cute::Layout<cute::Shape<cute::_8, cute::Int<kSwizzleCols>>, cute::Stride<cute::Int<kSwizzleCols>, cute::_1>>{}));
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutKV =
      decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  // V seen as (head dim, key): the same memory, read with ldmatrix.trans as the B operand of P*V.
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutKV{}, cute::make_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>{}, cute::GenRowMajor{})));

  using SmemCopyAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, Element>;
  using SmemStoreAtomO = cute::Copy_Atom<cute::UniversalCopy<uint32_t>, Element>;

  // Global <-> shared: 16-byte chunks, kChunksPerRow per row, kThreads / kChunksPerRow rows per pass.
  static constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
  static_assert(kThreads % kChunksPerRow == 0, "threads must cover whole rows");
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  // The loads and the epilogue assert that their passes cover whole tiles (the Hopper kernels' policy view of
  // 192 x 128 tiles has 48-row passes, which only its query side would use).

  // Shared memory: Q (reused for O), K, V, then the mask policy's tables.
  static constexpr int kTileBytesQ = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kTileBytesKV = kBlockN * kHeadDim * int(sizeof(Element));
  // Column prefix masks: 4 lane classes x 3 dims x (BlockN + 1) entries of 32 bits.
  static constexpr int kPrefixEntries = kBlockN + 1;
  static constexpr int kPrefixBytes = 4 * 3 * kPrefixEntries * 4;
  // Per-query-row windows: 3 dims x BlockM x (begin, end).
  static constexpr int kWindowBytes = 3 * kBlockM * 8;
  // Per-CTA constants the mainloop reads back instead of holding them in registers (KV head offsets,
  // the policy's tile ranges).
  static constexpr int kStateBytes = 128;
  // Two tables of KV row starts (K and V, one pointer per row) and the tile they describe (the policy's
  // Tile, at most kRowTableTileBytes; FmhaMainloop checks the whole table fits).
  static constexpr int kRowTableTileBytes = 64;
  static constexpr int kRowTableBytes = 2 * (2 * kBlockN * 8 + kRowTableTileBytes);
  static constexpr int kSmemBytes =
      kTileBytesQ + 2 * kTileBytesKV + kWindowBytes + kPrefixBytes + kStateBytes + kRowTableBytes;
};

}  // namespace attnkit::cuda::fmha
