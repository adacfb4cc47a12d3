// Compile-time shape of one backward instantiation: element type, compiled head dim (serves D and Dv up
// to it, zero padded), Q tile (BlockM queries), KV tile (BlockN keys), warps, the tensor-core MMA and the
// swizzled shared layouts, plus each kernel's shared-memory budget (the dK/dV kernel's in both modes).
//
// One TiledMMA (m16n8k16, warps stacked along M) serves every product of both kernels; warps therefore
// own whole rows of each accumulator, which is what lets a score tile computed as an accumulator be
// reused in registers as the A operand of the next product (P^T for dV, dS^T for dK, dS for dQ). The
// shared tiles use the forward's swizzle (16-byte chunks XOR-ed by row); a tile that is the B operand
// with its rows as the reduction dimension (dO and Q for dV and dK, K for dQ) is read through a
// transposed view with ldmatrix.trans.
#pragma once
#include <cutlass/numeric_types.h>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include <cstdint>
#include <type_traits>

namespace attnkit::cuda::fmha {

template <class Element_, int HeadDim_, int BlockM_, int BlockN_, int Warps_>
struct FmhaBackwardTraits {
  using Element = Element_;
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "the portable kernels run fp16 and bf16");
  static constexpr int kHeadDim = HeadDim_;
  static constexpr int kBlockM = BlockM_;  // queries per Q tile
  static constexpr int kBlockN = BlockN_;  // keys per KV tile
  static constexpr int kWarps = Warps_;
  static constexpr int kThreads = kWarps * 32;
  static_assert(kHeadDim == 32 || kHeadDim % 64 == 0, "compiled widths are 32, 64 and 128");
  static_assert(kBlockM % (16 * kWarps) == 0 && kBlockN % (16 * kWarps) == 0, "warps stack along M");
  static_assert(kBlockM % 16 == 0 && kBlockN % 16 == 0, "tile shape");

  using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>, cute::SM80_16x8x16_F32F16F16F32_TN,
                                   cute::SM80_16x8x16_F32BF16BF16F32_TN>;
  using TiledMma =
      cute::TiledMMA<cute::MMA_Atom<MmaOp>, cute::Layout<cute::Shape<cute::Int<kWarps>, cute::_1, cute::_1>>,
                     cute::Tile<cute::Int<16 * kWarps>, cute::_16, cute::_16>>;

  // 8 rows of 64 columns (128 bytes), 16-byte chunks XOR-ed by row % 8; the head-dim tiles at D 32 (the Hopper
  // tier's view only: no portable dK/dV kernel is compiled for it) take 8 rows of 32 columns, chunks XOR-ed
  // by (row / 2) % 4 as the Hopper tier's 64-byte swizzle does.
  using SmemAtomWide = decltype(cute::composition(
      cute::Swizzle<3, 3, 3>{}, cute::Layout<cute::Shape<cute::_8, cute::_64>, cute::Stride<cute::_64, cute::_1>>{}));
  using SmemAtomNarrow = decltype(cute::composition(
      cute::Swizzle<2, 3, 3>{}, cute::Layout<cute::Shape<cute::_8, cute::_32>, cute::Stride<cute::_32, cute::_1>>{}));
  using SmemAtom = std::conditional_t<kHeadDim % 64 == 0, SmemAtomWide, SmemAtomNarrow>;
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutKV =
      decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  // (head dim, token) views of the same memory: B operands whose reduction runs over tokens.
  using SmemLayoutQt = decltype(cute::composition(
      SmemLayoutQ{}, cute::make_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockM>>{}, cute::GenRowMajor{})));
  using SmemLayoutKVt = decltype(cute::composition(
      SmemLayoutKV{}, cute::make_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>{}, cute::GenRowMajor{})));

  // Fast mode (dQ += dS K inside the dK/dV kernel): dS with queries as rows, written from the dS^T
  // accumulator element by element; the product runs over 32-column slices of the head dim (slices of
  // the SmemLayoutKVt view, read transposed as the B operand) to keep its accumulators small.
  static constexpr int kDqSliceCols = 32;
  static constexpr int kDqSlices = kHeadDim / kDqSliceCols;
  using SmemLayoutDs =
      decltype(cute::tile_to_shape(SmemAtomWide{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>>{}));

  using SmemCopyAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, Element>;
  using SmemStoreAtom = cute::Copy_Atom<cute::UniversalCopy<uint32_t>, Element>;

  // Global <-> shared: 16-byte chunks (load_rows_async of fmha_tokens.cuh reads these names).
  static constexpr int kChunksPerRow = kHeadDim * int(sizeof(Element)) / 16;
  static_assert(kThreads % kChunksPerRow == 0, "threads must cover whole rows");
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kBlockM % kRowsPerPass == 0 && kBlockN % kRowsPerPass == 0, "passes must cover whole tiles");

  // Per-thread share of a score tile with R rows: kRowsOf<R> rows; columns: 2 per 8-wide MMA block.
  template <int Rows>
  static constexpr int kRowsOf = 2 * (Rows / (16 * kWarps));
  template <int Cols>
  static constexpr int kColsOf = 2 * (Cols / 8);

  static constexpr int kTileBytesQ = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kTileBytesKV = kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kRowStatBytes = 2 * kBlockM * 4;  // lse_log2 and delta of one Q tile
  static constexpr int kWindowBytes = 3 * kBlockM * 8;   // per-query windows of one Q tile (3 dims)
  // dK/dV kernel: K, V, then two buffers each of Q, dO, row statistics and query windows.
  static constexpr int kSmemBytesDkDv = 2 * kTileBytesKV + 2 * (2 * kTileBytesQ + kRowStatBytes + kWindowBytes);
  static constexpr int kTileBytesDs = kBlockM * kBlockN * int(sizeof(Element));
  static constexpr int kDqRowOffsetBytes = kBlockM * 8;  // dQ accumulator offsets of one Q tile's rows
  // Fast mode's dK/dV kernel: the same plus one dS tile and two buffers of row offsets.
  static constexpr int kSmemBytesDkDvFast = kSmemBytesDkDv + kTileBytesDs + 2 * kDqRowOffsetBytes;
  // With the gradient of a positional bias: one more fp32 dS tile after the fast-mode region.
  static constexpr int kSmemBytesDkDvBias = kSmemBytesDkDvFast + kBlockM * kBlockN * 4;
  // dQ kernel: Q, dO, then two buffers each of K and V.
  static constexpr int kSmemBytesDq = 2 * kTileBytesQ + 4 * kTileBytesKV;
};

}  // namespace attnkit::cuda::fmha
