// The Hopper forward's tile maps (make_sm90_tile_maps, cuda/fmha_sm90/fmha_sm90_tma.hpp): which token grids
// load their Q and K/V tiles as TMA boxes. Dilated grids do, the dilation as the map's element stride, up to a
// dilation of 8 and boxes spanning at most 256 tokens; beyond that the tiles are gathered with cp.async. The
// maps are encoded by the driver, so these run only with a GPU; the kernels' results on dilated windows are
// checked against the oracle by CudaFmhaForward.DilatedWindowsOnTmaBoxesMatchTheOracle.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda_test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaFmhaSm90TmaMaps, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::fmha::FmhaParams;
using cuda::fmha_sm90::Sm90TileMaps;

alignas(16) uint16_t g_storage[64];

// A contiguous [B, rows, cols, H, D] problem (no data is read: the maps only describe it) with 128-token boxes
// of 8 x 16 tokens and the given dilation in both dimensions.
FmhaParams grid_problem(int32_t rows, int32_t cols, int32_t dilation, int32_t batch = 2) {
  FmhaParams p;
  p.dims = 2;
  p.batch = batch;
  p.heads_q = 4;
  p.heads_per_kv = 1;
  p.head_dim = p.head_dim_v = 64;
  for (cuda::fmha::TokenSpace* space : {&p.q_space, &p.kv_space}) {
    space->extent[0] = rows;
    space->extent[1] = cols;
    space->box_log2[0] = 3;
    space->box_log2[1] = 4;
    space->box_shift[0] = 4;
  }
  p.dilation[0] = p.dilation[1] = dilation;
  for (cuda::fmha::TensorAddress* a : {&p.q, &p.k, &p.v, &p.o}) {
    a->data = g_storage;
    a->head_stride = 64;
    a->token_stride[1] = int64_t{4} * 64;
    a->token_stride[0] = int64_t{cols} * 4 * 64;
    a->batch_stride = int64_t{rows} * cols * 4 * 64;
  }
  return p;
}

Sm90TileMaps maps_of(const FmhaParams& p) {
  Sm90TileMaps maps{};
  cuda::fmha_sm90::make_sm90_tile_maps(p, DType::bf16, 64, 128, 128, maps);
  return maps;
}

TEST(CudaFmhaSm90TmaMaps, DilatedGridsLoadTheirTilesAsBoxes) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device: the tensor maps are encoded by the driver";
  for (int32_t dilation : {1, 2, 3, 8}) {
    SCOPED_TRACE("dilation " + std::to_string(dilation));
    const Sm90TileMaps maps = maps_of(grid_problem(57, 61, dilation));
    EXPECT_EQ(maps.enabled, 1);
    EXPECT_EQ(maps.q_enabled, 1);
    EXPECT_EQ(maps.rank, 5);  // (columns, head, column token, row token, batch)
    EXPECT_EQ(maps.has_batch, 1);
  }
}

TEST(CudaFmhaSm90TmaMaps, DilationsTmaCannotStepAreGathered) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device: the tensor maps are encoded by the driver";
  EXPECT_EQ(maps_of(grid_problem(90, 90, 9)).enabled, 0) << "element strides go up to 8";
  FmhaParams wide = grid_problem(40, 4000, 2, 1);
  wide.kv_space.box_log2[0] = 0;  // 1 x 128 boxes: 256 tokens spanned at dilation 2, 384 at 3
  wide.kv_space.box_log2[1] = 7;
  wide.kv_space.box_shift[0] = 7;
  EXPECT_EQ(maps_of(wide).enabled, 1);
  wide.dilation[0] = wide.dilation[1] = 3;
  EXPECT_EQ(maps_of(wide).enabled, 0) << "a box spans at most 256 tokens";
}

#endif

}  // namespace
}  // namespace attnkit
