// The scattered kernels' TMA maps (make_scattered_key_value_maps, cuda/sparse/scattered_tma_maps.hpp): the
// layouts TMA cannot express are refused before the driver is asked (so the forward and the dQ kernel stage with
// cp.async), on any machine; with a GPU, the contiguous heads-last layout of one and of several batch elements is
// accepted.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda_test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/sparse/scattered_tma_maps.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaScatteredTmaMaps, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::sparse::ScatteredBackwardParams;
using cuda::sparse::ScatteredForwardParams;
using cuda::sparse::ScatteredTmaForwardParams;
using cuda::sparse::ScatteredTmaGradQParams;
using cuda::sparse::SequenceTensor;

alignas(16) uint16_t g_storage[64];

// A contiguous [B, S, H, D] view of `heads` heads (no data is read: the maps only describe it).
SequenceTensor contiguous(int32_t tokens, int32_t heads, int32_t dim) {
  SequenceTensor t;
  t.data = g_storage;
  t.head_stride = dim;
  t.token_stride[0] = int64_t{heads} * dim;
  t.batch_stride = int64_t{tokens} * heads * dim;
  t.extent[0] = tokens;
  return t;
}

ScatteredForwardParams problem(int32_t dim = 64) {
  ScatteredForwardParams p;
  p.seq_q = p.seq_k = 1000;
  p.heads_q = 8;
  p.heads_per_kv = 2;
  p.head_dim = p.head_dim_v = dim;
  p.k = p.v = contiguous(p.seq_k, 4, dim);
  return p;
}

TEST(CudaScatteredTmaMaps, LayoutsTmaCannotExpressAreRefused) {
  ScatteredTmaForwardParams out;
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(problem(128), 1, out)) << "wider than one 64-column box";
  ScatteredForwardParams grid = problem();
  grid.k.token_dims = 2;  // a token grid: rows of a tile are not one stride apart
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(grid, 1, out));
  ScatteredForwardParams misaligned = problem();
  misaligned.v.data = g_storage + 1;
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(misaligned, 1, out)) << "data not 16-byte aligned";
  ScatteredForwardParams odd_stride = problem(40);
  odd_stride.k.token_stride[0] = 4 * 40 + 4;  // 328 bytes: not a multiple of 16
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(odd_stride, 1, out));
  ScatteredForwardParams odd_batch = problem();
  odd_batch.k.batch_stride = 4 * 64 * 1000 + 4;
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(odd_batch, 2, out)) << "batch stride of 2 elements";
}

// The dK/dV kernel's maps (Q, dO and the lse2 / delta workspace rows): widths past one box and an empty batch are
// refused before the driver is asked; with a GPU the backward oracle tests run the accepted maps.
TEST(CudaScatteredTmaMaps, QueryMapsRefuseWidthsPastOneBox) {
  const ScatteredForwardParams sizes = problem(128);
  ScatteredBackwardParams backward;
  static_cast<cuda::sparse::ScatteredSizes&>(backward) = sizes;
  backward.q = backward.grad_out = contiguous(sizes.seq_q, 8, 128);
  backward.batch = 1;
  backward.row_pitch = 1000;
  cuda::sparse::ScatteredTmaKeyParams out;
  EXPECT_FALSE(cuda::sparse::make_scattered_query_maps(backward, out)) << "D 128";
  backward.head_dim = backward.head_dim_v = 64;
  backward.batch = 0;
  EXPECT_FALSE(cuda::sparse::make_scattered_query_maps(backward, out)) << "no batch element";
}

TEST(CudaScatteredTmaMaps, ContiguousHeadsLastViewsAreAccepted) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device: the tensor maps are encoded by the driver";
  ScatteredTmaForwardParams out;
  ASSERT_TRUE(cuda::sparse::make_scattered_key_value_maps(problem(), 1, out));
  EXPECT_EQ(out.rank, 3);
  ASSERT_TRUE(cuda::sparse::make_scattered_key_value_maps(problem(), 3, out));
  EXPECT_EQ(out.rank, 4);
  EXPECT_EQ(out.base.heads_q, 8);
  // The dQ kernel's block: the same maps of its K and V.
  const ScatteredForwardParams sizes = problem();
  ScatteredBackwardParams backward;
  static_cast<cuda::sparse::ScatteredSizes&>(backward) = sizes;
  backward.k = sizes.k;
  backward.v = sizes.v;
  backward.batch = 3;
  ScatteredTmaGradQParams grad_q_out;
  ASSERT_TRUE(cuda::sparse::make_scattered_key_value_maps(backward, backward.batch, grad_q_out));
  EXPECT_EQ(grad_q_out.rank, 4);
  EXPECT_EQ(grad_q_out.base.batch, 3);
  backward.v.data = g_storage + 1;
  EXPECT_FALSE(cuda::sparse::make_scattered_key_value_maps(backward, backward.batch, grad_q_out)) << "V not aligned";
}

#endif

}  // namespace
}  // namespace attnkit
