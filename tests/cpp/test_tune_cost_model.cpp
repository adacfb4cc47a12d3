// The analytical cost model that ranks configs before any timing (DESIGN §6.3).
#include <gtest/gtest.h>

#include "cpu/tune/cpu_attention_space.hpp"
#include "test_tune_support.hpp"
#include "tune/attention_tile_work.hpp"
#include "tune/roofline.hpp"

namespace attnkit::tune {
namespace {

ProblemSpec dense(int64_t length) {
  ProblemSpec spec = testing::test_problem(length);
  spec.mask = MaskKind::none;
  return spec;
}

TEST(TuneCostModel, APartialTileCostsAFullTile) {
  const TileWork exact = attention_tile_work(dense(128), 64, 64);
  const TileWork ragged = attention_tile_work(dense(65), 64, 64);
  EXPECT_EQ(ragged.tiles, exact.tiles);
  EXPECT_DOUBLE_EQ(ragged.flops_per_tile, exact.flops_per_tile);
}

TEST(TuneCostModel, CausalVisitsAboutHalfTheKeyTiles) {
  ProblemSpec causal = dense(4096);
  causal.mask = MaskKind::causal;
  const double dense_flops = attention_tile_work(dense(4096), 64, 64).flops_per_tile;
  const double causal_flops = attention_tile_work(causal, 64, 64).flops_per_tile;
  EXPECT_NEAR(causal_flops / dense_flops, 0.5, 0.02);
}

TEST(TuneCostModel, BottomRightCausalWithAShortQueryVisitsAllKeys) {
  ProblemSpec decode = dense(4096);
  decode.tokens = {64, 1, 1};
  decode.mask = MaskKind::causal;
  decode.causal_alignment = CausalAlignment::bottom_right;
  EXPECT_EQ(visited_kv_tiles(decode, 64, 64, 0), 64);
  decode.causal_alignment = CausalAlignment::top_left;
  EXPECT_EQ(visited_kv_tiles(decode, 64, 64, 0), 1);
}

TEST(TuneCostModel, NeighborhoodVisitsFarFewerTilesThanDense) {
  ProblemSpec na = dense(1);
  na.token_dims = 2;
  na.tokens = na.tokens_kv = {64, 64, 1};
  na.mask = MaskKind::neighborhood;
  na.neighborhood[0] = na.neighborhood[1] = NeighborhoodDim{7, 1, 1, false};
  const int64_t visited = visited_kv_tiles(na, 64, 64, 0);
  EXPECT_GE(visited, 7);  // the 7 key rows of a 1 x 64 query row
  EXPECT_LE(visited, 16);
  EXPECT_EQ(visited_kv_tiles(dense(64 * 64), 64, 64, 0), 64);
}

TEST(TuneCostModel, SparseMasksScaleWithDensity) {
  ProblemSpec sparse = dense(4096);
  sparse.mask = MaskKind::block;
  sparse.block_q = sparse.block_k = 64;
  sparse.density = 0.25;
  EXPECT_EQ(visited_kv_tiles(sparse, 64, 64, 0), 16);
}

TEST(TuneCostModel, SmallerQueryTilesReReadKeysAndValuesMoreOften) {
  const TileWork small = attention_tile_work(dense(4096), 16, 64);
  const TileWork large = attention_tile_work(dense(4096), 128, 64);
  const double small_bytes = small.bytes_per_tile * static_cast<double>(small.tiles);
  const double large_bytes = large.bytes_per_tile * static_cast<double>(large.tiles);
  EXPECT_GT(small_bytes, 4.0 * large_bytes);
}

TEST(TuneCostModel, OneBlockPastAFullWaveCostsASecondWave) {
  DeviceLimits limits = testing::test_limits();
  TileWork work{limits.processors, 1e9, 0.0};
  const CostEstimate full = roofline_estimate(work, limits.processors, 1, limits);
  work.tiles += 1;
  const CostEstimate spill = roofline_estimate(work, limits.processors, 1, limits);
  EXPECT_EQ(full.waves, 1);
  EXPECT_EQ(spill.waves, 2);
  const double per_wave = full.seconds - limits.launch_overhead_seconds;
  EXPECT_NEAR(spill.seconds - limits.launch_overhead_seconds, 2 * per_wave, 1e-12);
}

TEST(TuneCostModel, OccupancyIsLimitedByTheScarcestResource) {
  const DeviceLimits limits = testing::test_limits();  // H100: 228 KiB smem, 2048 threads, 64K regs per SM
  EXPECT_EQ(blocks_per_processor({100 * 1024, 0, 128}, limits), 2);  // shared memory
  EXPECT_EQ(blocks_per_processor({0, 0, 512}, limits), 4);           // threads
  EXPECT_EQ(blocks_per_processor({0, 128, 256}, limits), 2);         // registers
}

TEST(TuneCostModel, CpuSpacePrefersAllThreadsForALargeProblem) {
  const ConfigSpace space = cpu_attention_space(TuneOp::attention_forward);
  const DeviceLimits limits = cpu_device_limits(8);
  const Config* all = space.find("q64-all");
  const Config* one = space.find("q64-t1");
  ASSERT_NE(all, nullptr);
  ASSERT_NE(one, nullptr);
  EXPECT_LT(space.estimate(*all, dense(2048), limits).seconds, space.estimate(*one, dense(2048), limits).seconds);
}

}  // namespace
}  // namespace attnkit::tune
