// The box shapes of the CUDA backends' neighborhood tiles (src/cuda/fmha/fmha_box_shape.hpp): the choice
// minimises the modelled visits over every split of the tile sizes, of whole KV tiles or, for the Hopper
// backward's two MMA warpgroups, of KV half tiles, with the KV tile origins of the kernels that will
// walk them (window origins for the forward's KV tiles and the backward dK/dV kernels' Q tiles, aligned
// for the Hopper backward's ordered dQ). Host-only (no GPU needed), in CUDA builds.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "attnkit/attention.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/fmha/fmha_box_shape.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(FmhaBoxShape, SkipsWithoutCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::KvTileOrigin;
using cuda::fmha::BoxGeometry;
using cuda::fmha::BoxShapes;

constexpr int kQueriesLog2 = 6;  // 64 queries per Q tile
constexpr int kKeysLog2 = 7;     // 128 keys per KV tile

BoxGeometry square_window(int64_t extent, int64_t kernel) {
  std::array<NeighborhoodDim, kMaxTokenDims> dims{};
  dims[0].kernel_size = dims[1].kernel_size = kernel;
  return cuda::fmha::neighborhood_geometry(2, dims, {extent, extent, 1});
}

// The modelled cost the chooser minimises: visits plus a quarter per partial visit.
double cost(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins = KvTileOrigin::aligned) {
  const auto c = cuda::fmha::count_box_visits(g, s, origins);
  return c.visited + 0.25 * (c.visited - c.full);
}

// The same shapes with the KV box halved along its first dimension of more than one key.
BoxShapes halved(BoxShapes s) {
  for (int& k : s.kv_log2) {
    if (k > 0) {
      --k;
      break;
    }
  }
  return s;
}

TEST(FmhaBoxShape, ShapesSplitTheTileSizesOverTheDimensions) {
  const BoxGeometry g = square_window(128, 31);
  for (const bool halves : {false, true}) {
    const BoxShapes s = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, halves, KvTileOrigin::aligned);
    EXPECT_EQ(s.q_log2[0] + s.q_log2[1] + s.q_log2[2], kQueriesLog2);
    EXPECT_EQ(s.kv_log2[0] + s.kv_log2[1] + s.kv_log2[2], kKeysLog2);
    EXPECT_EQ(s.q_log2[2], 0) << "a 2-D problem has no third box dimension";
  }
}

// Every other split costs at least as much as the chosen one, by whole tiles or by half tiles.
TEST(FmhaBoxShape, TheChoiceIsTheCheapestSplitOfWholeOrHalfTiles) {
  const BoxGeometry g = square_window(128, 31);
  const BoxShapes whole = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, false, KvTileOrigin::aligned);
  const BoxShapes half = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, true, KvTileOrigin::aligned);
  for (int q = 0; q <= kQueriesLog2; ++q) {
    for (int k = 0; k <= kKeysLog2; ++k) {
      BoxShapes other;
      other.q_log2 = {q, kQueriesLog2 - q, 0};
      other.kv_log2 = {k, kKeysLog2 - k, 0};
      EXPECT_LE(cost(g, whole), cost(g, other) * (1 + 1e-9)) << "Q 2^" << q << " rows, KV 2^" << k << " rows";
      EXPECT_LE(cost(g, halved(half)), cost(g, halved(other)) * (1 + 1e-9))
          << "halves: Q 2^" << q << " rows, KV 2^" << k << " rows";
    }
  }
  EXPECT_LT(cost(g, halved(half)), cost(g, halved(whole)))
      << "128x128 K31: scoring half tiles picks a KV box whose halves skip more visits";
}

// The forward's shapes are scored by the tiles its BoxPolicy walks (window origins): the cheapest split
// under that model, never more visits than the aligned walk of the aligned choice.
TEST(FmhaBoxShape, ForwardShapesAreTheCheapestSplitAtWindowOrigins) {
  for (const int64_t kernel : {3, 7, 13, 31}) {
    const BoxGeometry g = square_window(56, kernel);
    const BoxShapes forward = cuda::fmha::choose_box_shapes(g, 7, 7, false, KvTileOrigin::window);
    const BoxShapes aligned = cuda::fmha::choose_box_shapes(g, 7, 7, false, KvTileOrigin::aligned);
    for (int q = 0; q <= 7; ++q) {
      for (int k = 0; k <= 7; ++k) {
        BoxShapes other;
        other.q_log2 = {q, 7 - q, 0};
        other.kv_log2 = {k, 7 - k, 0};
        EXPECT_LE(cost(g, forward, KvTileOrigin::window), cost(g, other, KvTileOrigin::window) * (1 + 1e-9))
            << "K" << kernel << ": Q 2^" << q << " rows, KV 2^" << k << " rows";
      }
    }
    EXPECT_LE(cuda::fmha::count_box_visits(g, forward, KvTileOrigin::window).visited,
              cuda::fmha::count_box_visits(g, aligned, KvTileOrigin::aligned).visited)
        << "K" << kernel;
  }
}

// 56x56, K = 7, tiles of 128: window origins let 8x16 Q boxes meet 2.75 KV boxes of 16x8 on average,
// where the aligned walk's best shapes (2x64) need 4.86 (bench/box_tile_visits.cc).
TEST(FmhaBoxShape, WindowOriginsCutTheTilesOfSmallTwoDimensionalWindows) {
  const BoxGeometry g = square_window(56, 7);
  const BoxShapes forward = cuda::fmha::choose_box_shapes(g, 7, 7, false, KvTileOrigin::window);
  const BoxShapes aligned = cuda::fmha::choose_box_shapes(g, 7, 7, false, KvTileOrigin::aligned);
  ASSERT_EQ(forward.q_log2, (std::array<int, 3>{3, 4, 0}));
  ASSERT_EQ(aligned.q_log2, (std::array<int, 3>{1, 6, 0}));
  const double q_tiles = 28.0;  // 7 x 4 boxes of 8x16, or 28 x 1 boxes of 2x64
  EXPECT_NEAR(cuda::fmha::count_box_visits(g, forward, KvTileOrigin::window).visited / q_tiles, 2.75, 1e-9);
  EXPECT_NEAR(cuda::fmha::count_box_visits(g, aligned, KvTileOrigin::aligned).visited / q_tiles, 4.86, 0.005);
}

// The backward's modelled cost: the dK/dV walk's visits (per KV tile, its Q tiles) plus a quarter per
// partial visit.
double backward_cost(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin q_origins) {
  const auto c = cuda::fmha::count_backward_box_visits(g, s, q_origins);
  return c.visited + 0.25 * (c.visited - c.full);
}

BoxGeometry dilated_causal_geometry() {
  std::array<NeighborhoodDim, kMaxTokenDims> dims{};
  dims[0].kernel_size = 5;
  dims[0].dilation = 3;
  dims[0].causal = true;
  dims[1].kernel_size = 9;
  dims[1].stride = 2;
  dims[2].kernel_size = 3;
  dims[2].dilation = 2;
  return cuda::fmha::neighborhood_geometry(3, dims, {23, 37, 19});
}

// Aligned Q tiles of a KV tile are the (Q tile, KV tile) pairs of the forward's aligned walk, seen from
// the other side: the same counts.
TEST(FmhaBoxShape, BackwardAlignedVisitsAreTheForwardAlignedPairs) {
  for (const BoxGeometry& g : {square_window(56, 7), square_window(57, 13), dilated_causal_geometry()}) {
    for (int q = 0; q <= 3; ++q) {
      for (int k = 0; k <= 3; ++k) {
        BoxShapes s;
        s.q_log2 = {q, 3 - q, g.dims == 3 ? 2 : 0};
        s.kv_log2 = {k, 4 - k, g.dims == 3 ? 1 : 0};
        const auto forward = cuda::fmha::count_box_visits(g, s, KvTileOrigin::aligned);
        const auto backward = cuda::fmha::count_backward_box_visits(g, s, KvTileOrigin::aligned);
        EXPECT_DOUBLE_EQ(backward.visited, forward.visited) << "Q 2^" << q << ", KV 2^" << k;
        EXPECT_DOUBLE_EQ(backward.full, forward.full) << "Q 2^" << q << ", KV 2^" << k;
      }
    }
  }
}

// The backward's shapes at window origins are the cheapest split of whole KV tiles under the dK/dV walk's
// model, and never visit more than the aligned walk of the aligned choice; with aligned origins the
// backward keeps the shapes it chose before (the forward's aligned choice).
TEST(FmhaBoxShape, BackwardShapesAreTheCheapestSplitAtWindowOrigins) {
  for (const int64_t kernel : {3, 7, 13, 31}) {
    const BoxGeometry g = square_window(56, kernel);
    const BoxShapes backward = cuda::fmha::choose_backward_box_shapes(g, 6, 7, false, KvTileOrigin::window);
    const BoxShapes aligned = cuda::fmha::choose_backward_box_shapes(g, 6, 7, false, KvTileOrigin::aligned);
    for (int q = 0; q <= 6; ++q) {
      for (int k = 0; k <= 7; ++k) {
        BoxShapes other;
        other.q_log2 = {q, 6 - q, 0};
        other.kv_log2 = {k, 7 - k, 0};
        EXPECT_LE(backward_cost(g, backward, KvTileOrigin::window),
                  backward_cost(g, other, KvTileOrigin::window) * (1 + 1e-9))
            << "K" << kernel << ": Q 2^" << q << " rows, KV 2^" << k << " rows";
      }
    }
    EXPECT_LE(cuda::fmha::count_backward_box_visits(g, backward, KvTileOrigin::window).visited,
              cuda::fmha::count_backward_box_visits(g, aligned, KvTileOrigin::aligned).visited)
        << "K" << kernel;
    for (const bool halves : {false, true}) {
      const BoxShapes before = cuda::fmha::choose_box_shapes(g, 6, 7, halves, KvTileOrigin::aligned);
      const BoxShapes now = cuda::fmha::choose_backward_box_shapes(g, 6, 7, halves, KvTileOrigin::aligned);
      EXPECT_EQ(now.q_log2, before.q_log2) << "K" << kernel;
      EXPECT_EQ(now.kv_log2, before.kv_log2) << "K" << kernel;
    }
  }
}

// The Hopper dK/dV kernel (64 x 128 tiles, two halves): window origins cut the half-tile visits its MMA
// warpgroups run on small 2-D windows; 56x56 K7 from 169 to 91 (bench/box_tile_visits_backward.cc).
TEST(FmhaBoxShape, WindowOriginsCutTheBackwardHalfVisitsOfSmallTwoDimensionalWindows) {
  for (const int64_t kernel : {3, 7}) {
    const BoxGeometry g = square_window(56, kernel);
    const BoxShapes window = cuda::fmha::choose_backward_box_shapes(g, 6, 7, true, KvTileOrigin::window);
    const BoxShapes aligned = cuda::fmha::choose_backward_box_shapes(g, 6, 7, true, KvTileOrigin::aligned);
    EXPECT_LT(cuda::fmha::count_backward_box_visits(g, window, KvTileOrigin::window, true).visited,
              cuda::fmha::count_backward_box_visits(g, aligned, KvTileOrigin::aligned, true).visited)
        << "K" << kernel;
  }
  const BoxGeometry g = square_window(56, 7);
  const BoxShapes window = cuda::fmha::choose_backward_box_shapes(g, 6, 7, true, KvTileOrigin::window);
  const BoxShapes aligned = cuda::fmha::choose_backward_box_shapes(g, 6, 7, true, KvTileOrigin::aligned);
  EXPECT_DOUBLE_EQ(cuda::fmha::count_backward_box_visits(g, aligned, KvTileOrigin::aligned, true).visited / 2, 169);
  EXPECT_DOUBLE_EQ(cuda::fmha::count_backward_box_visits(g, window, KvTileOrigin::window, true).visited / 2, 91);
}

#endif

}  // namespace
}  // namespace attnkit
