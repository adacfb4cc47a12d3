// The box shapes of the CUDA backends' neighborhood tiles (src/cuda/fmha/fmha_box_shape.hpp): the choice
// minimises the modelled visits over every split of the tile sizes, of whole KV tiles or, for the Hopper
// backward's two MMA warpgroups, of KV half tiles. Host-only (no GPU needed), in CUDA builds.
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
double cost(const BoxGeometry& g, const BoxShapes& s) {
  const auto c = cuda::fmha::count_box_visits(g, s);
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
    const BoxShapes s = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, halves);
    EXPECT_EQ(s.q_log2[0] + s.q_log2[1] + s.q_log2[2], kQueriesLog2);
    EXPECT_EQ(s.kv_log2[0] + s.kv_log2[1] + s.kv_log2[2], kKeysLog2);
    EXPECT_EQ(s.q_log2[2], 0) << "a 2-D problem has no third box dimension";
  }
}

// Every other split costs at least as much as the chosen one, by whole tiles or by half tiles.
TEST(FmhaBoxShape, TheChoiceIsTheCheapestSplitOfWholeOrHalfTiles) {
  const BoxGeometry g = square_window(128, 31);
  const BoxShapes whole = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, false);
  const BoxShapes half = cuda::fmha::choose_box_shapes(g, kQueriesLog2, kKeysLog2, true);
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

#endif

}  // namespace
}  // namespace attnkit
