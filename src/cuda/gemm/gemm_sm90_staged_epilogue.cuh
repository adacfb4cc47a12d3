// The epilogue of the wide-tile Hopper GEMM kernel (gemm_sm90_wide_tile.cuh), whose consumer warp groups each own
// a band of the tile's rows (64 rows of 192 a warp group).
//
// Algorithm. Each consumer warp group computes alpha * acc (+ beta * C, C read as 16-bit pairs at the
// accumulator's own positions) and writes the results as 16-bit pairs into a shared copy of the CTA's output
// tile, whose rows are padded by 16 bytes (the eight rows of an accumulator quad then fall on distinct banks).
// After a barrier of its 128 threads, the warp group copies its own rows of the tile to C in 16-byte row chunks
// (whole chunks: the rows' refusal asks for N and the leading dimensions in multiples of 16 bytes and a 16-byte
// aligned C), bounded by the problem's M and N, and meets at the barrier again before the tile is reused. The
// warp groups never wait for each other. Shared memory: TileM x (TileN + 16 bytes) 16-bit values.
#pragma once
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_conversion.h"

namespace attnkit::cuda::gemm::sm90 {

template <class Element, class TileShape, int WarpGroups>
class StagedRowEpilogue {
 public:
  static_assert(sizeof(Element) == 2, "the staged epilogue writes 16-bit pairs");
  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kChunk = 16 / static_cast<int>(sizeof(Element));  // elements in 16 bytes
  static constexpr int kPitch = kTileN + kChunk;                         // a shared row, in elements
  static constexpr int kWarpGroupThreads = 128;
  static constexpr int kRowsPerWarpGroup = kTileM / WarpGroups;
  static_assert(kRowsPerWarpGroup % 64 == 0, "each warp group owns whole 64-row wgmma bands");
  static_assert(kTileN % kChunk == 0, "rows of whole 16-byte chunks");
  static constexpr int kChunksPerRow = kTileN / kChunk;
  // Named barriers of the consumer warp groups (after CUTLASS's reserved ones).
  static constexpr uint32_t kFirstBarrier = 0;

  struct SharedStorage {
    alignas(128) Element tile[kTileM * kPitch];
  };
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;  // C row-major: (row, 1, batch)
  using StrideD = StrideC;

  struct Scalars {
    float alpha = 1.0f;
    float beta = 0.0f;
  };
  struct Arguments {
    Scalars thread{};
    const Element* ptr_C = nullptr;
    StrideC dC{};
    Element* ptr_D = nullptr;
    StrideD dD{};
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(const ProblemShape&, const Arguments& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(const ProblemShape&, const Arguments&) {
    return true;
  }

  CUTLASS_HOST_DEVICE explicit StagedRowEpilogue(const Params& params, const SharedStorage& = SharedStorage())
      : params_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 const cute::Tensor<FrgEngine, FrgLayout>& accumulators, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    using namespace cute;
    const int64_t m = get<0>(problem_shape_mnkl), n = get<1>(problem_shape_mnkl);
    const int64_t row0 = static_cast<int64_t>(get<0>(blk_coord_mnkl)) * kTileM;
    const int64_t col0 = static_cast<int64_t>(get<1>(blk_coord_mnkl)) * kTileN;
    const int64_t batch = get<3>(blk_coord_mnkl);
    const int rows_left = static_cast<int>(cute::min(m - row0, int64_t{kTileM}));
    const int cols_left = static_cast<int>(cute::min(n - col0, int64_t{kTileN}));
    Element* tile = reinterpret_cast<SharedStorage*>(smem)->tile;

    Tensor shared = make_tensor(
        make_smem_ptr(tile), make_layout(make_shape(Int<kTileM>{}, Int<kTileN>{}), make_stride(Int<kPitch>{}, _1{})));
    Tensor positions = make_identity_tensor(make_shape(Int<kTileM>{}, Int<kTileN>{}));
    auto thread_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor shared_part = thread_mma.partition_C(shared);
    Tensor position_part = thread_mma.partition_C(positions);
    static_assert(decltype(size(accumulators))::value % 2 == 0, "accumulators come in column pairs");

    const float alpha = params_.thread.alpha, beta = params_.thread.beta;
    cutlass::NumericArrayConverter<Element, float, 2, cutlass::FloatRoundStyle::round_to_nearest> convert;
    const int64_t ldc = get<0>(params_.dC);
    const Element* c_tile = params_.ptr_C + batch * get<2>(params_.dC) + row0 * ldc + col0;
    const bool source = beta != 0.0f;
    // Elements 2 j and 2 j + 1 of a wgmma accumulator are columns c and c + 1 of one row.
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 2) {
      cutlass::Array<float, 2> value{};
      value[0] = alpha * accumulators(i);
      value[1] = alpha * accumulators(i + 1);
      if (source) {
        const int row = get<0>(position_part(i)), col = get<1>(position_part(i));
        if (row < rows_left && col < cols_left) {
          const auto pair = *reinterpret_cast<const cutlass::Array<Element, 2>*>(c_tile + row * ldc + col);
          value[0] += beta * static_cast<float>(pair[0]);
          value[1] += beta * static_cast<float>(pair[1]);
        }
      }
      *reinterpret_cast<cutlass::Array<Element, 2>*>(&shared_part(i)) = convert(value);
    }
    const uint32_t barrier = kFirstBarrier + static_cast<uint32_t>(thread_idx / kWarpGroupThreads);
    cutlass::arch::NamedBarrier::sync(kWarpGroupThreads, barrier);

    const int64_t ldd = get<0>(params_.dD);
    Element* d_tile = params_.ptr_D + batch * get<2>(params_.dD) + row0 * ldd + col0;
    const int first_row = (thread_idx / kWarpGroupThreads) * kRowsPerWarpGroup;
    static_assert(kRowsPerWarpGroup * kChunksPerRow % kWarpGroupThreads == 0, "whole rounds of 16-byte copies");
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kRowsPerWarpGroup * kChunksPerRow / kWarpGroupThreads; ++j) {
      const int chunk = thread_idx % kWarpGroupThreads + j * kWarpGroupThreads;
      const int row = first_row + chunk / kChunksPerRow;
      const int col = (chunk % kChunksPerRow) * kChunk;
      if (row < rows_left && col < cols_left) {
        *reinterpret_cast<uint4*>(d_tile + row * ldd + col) =
            *reinterpret_cast<const uint4*>(tile + row * kPitch + col);
      }
    }
    cutlass::arch::NamedBarrier::sync(kWarpGroupThreads, barrier);
  }

 private:
  Params params_;
};

}  // namespace attnkit::cuda::gemm::sm90
