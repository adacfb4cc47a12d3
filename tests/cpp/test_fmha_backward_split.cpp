// The automatic KV-parallel split choice of the CUDA backward (src/cuda/fmha/fmha_backward_split.hpp) and
// the workspace its partials take: host-only (no GPU needed), in CUDA builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "attnkit/attention.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_backward_split.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(FmhaBackwardSplit, SkipsWithoutCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::fmha::choose_kv_splits;
using cuda::fmha::kv_split_time;
using cuda::fmha::KvSplitInputs;

// 8 KV tiles of one KV head (MQA) on a 132-SM device, one CTA per SM, 128 visits per tile.
KvSplitInputs few_tiles() {
  KvSplitInputs in;
  in.ctas = 8;
  in.visits = 128;
  in.slots = 132;
  in.partial_bytes = 1 << 20;
  return in;
}

TEST(FmhaBackwardSplit, AGridOfFewTilesSplitsToFillTheSmsWithoutASecondWave) {
  const KvSplitInputs in = few_tiles();
  const int32_t s = choose_kv_splits(in);
  EXPECT_GT(s, 1);
  EXPECT_LE(in.ctas * s, in.slots) << "a second, mostly idle wave costs more than it saves";
  for (int32_t other = 1; other <= 64; ++other) {
    EXPECT_LE(kv_split_time(in, s), kv_split_time(in, other)) << "splits " << s << " vs " << other;
  }
}

TEST(FmhaBackwardSplit, AFullGridIsNotSplit) {
  KvSplitInputs in = few_tiles();
  in.ctas = 132 * 4;
  EXPECT_EQ(choose_kv_splits(in), 1);
  in.ctas = 132;
  EXPECT_EQ(choose_kv_splits(in), 1) << "one full wave: splitting only adds partial traffic";
}

TEST(FmhaBackwardSplit, SplitsKeepAtLeastTheMinimumVisitsEach) {
  KvSplitInputs in = few_tiles();
  in.visits = 6;
  const int32_t s = choose_kv_splits(in);
  EXPECT_LE(s, 6 / cuda::fmha::kMinVisitsPerSplit);
  in.visits = 1;
  EXPECT_EQ(choose_kv_splits(in), 1) << "nothing to share";
}

TEST(FmhaBackwardSplit, TheWorkspaceLimitBoundsTheAutomaticChoice) {
  KvSplitInputs in = few_tiles();
  in.workspace_limit = 0;
  EXPECT_EQ(choose_kv_splits(in), 1) << "limit 0: never split automatically";
  in.workspace_limit = 3 * in.partial_bytes;
  EXPECT_LE(choose_kv_splits(in), 3);
  EXPECT_GT(choose_kv_splits(in), 1);
  in.workspace_limit = -1;  // the default bound
  in.partial_bytes = kDefaultSplitWorkspaceBytes / 2;
  EXPECT_LE(choose_kv_splits(in), 2);
  in.partial_bytes = kDefaultSplitWorkspaceBytes;
  EXPECT_EQ(choose_kv_splits(in), 1);
}

TEST(FmhaBackwardSplit, AnExplicitCountIsTakenAsAskedUpToTheMaximum) {
  KvSplitInputs in = few_tiles();
  in.ctas = 10000;  // the model would not split
  in.requested = 5;
  in.workspace_limit = 0;  // nor would the limit: an explicit count is not limited
  EXPECT_EQ(choose_kv_splits(in), 5);
  in.requested = 1;
  EXPECT_EQ(choose_kv_splits(in), 1);
  in.requested = kMaxBackwardKvSplits + 7;
  EXPECT_EQ(choose_kv_splits(in), kMaxBackwardKvSplits);
}

TEST(FmhaBackwardSplit, AnUnknownDeviceNeverSplitsAutomatically) {
  KvSplitInputs in = few_tiles();
  in.slots = 0;
  in.visits = 0;  // make_backward_launch does not estimate visits then
  EXPECT_EQ(choose_kv_splits(in), 1);
}

// A bf16 [B, S, H, D] problem on the fake device address (only sizes and choices are computed).
AttentionBackward fake_problem(std::vector<int64_t>& q_extents, std::vector<int64_t>& kv_extents,
                               std::vector<int64_t>& lse_extents) {
  const Device gpu{DeviceType::cuda, 0};
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  AttentionBackward p;
  p.q = p.out = p.grad_out = p.grad_q = make_view(fake, DType::bf16, 4, q_extents.data(), gpu);
  p.k = p.v = p.grad_k = p.grad_v = make_view(fake, DType::bf16, 4, kv_extents.data(), gpu);
  p.lse = make_view(fake, DType::f32, 3, lse_extents.data(), gpu);
  return p;
}

const cuda::fmha::FmhaBackwardKernel* bf16_d64_box_kernel() {
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.dtype == DType::bf16 && k.config.head_dim == 64 &&
        k.config.policy == cuda::fmha::FmhaBackwardPolicy::box) {
      return &k;
    }
  }
  return nullptr;
}

TEST(FmhaBackwardSplit, ExplicitSplitsAddExactlyTheirFp32PartialsToTheWorkspace) {
  const auto* kernel = bf16_d64_box_kernel();
  if (kernel == nullptr) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  std::vector<int64_t> q_extents{2, 300, 4, 64}, kv_extents{2, 300, 2, 64}, lse_extents{2, 300, 4};
  AttentionBackward p = fake_problem(q_extents, kv_extents, lse_extents);
  const detail::AttentionShape shape = detail::describe_attention(p.q, p.k, p.v, p.scale);
  p.kv_splits = 1;
  const auto unsplit = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132);
  EXPECT_EQ(unsplit.params.kv_splits, 1);
  p.kv_splits = 3;
  const auto split = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132);
  EXPECT_EQ(split.params.kv_splits, 3);
  const int64_t tiles = (300 + kernel->config.block_n - 1) / kernel->config.block_n;
  const int64_t partials = 3 * 2 * (2 * 2 * tiles * kernel->config.block_n * 64 * 4);  // splits x (dK, dV)
  EXPECT_EQ(kernel->workspace_bytes(split) - kernel->workspace_bytes(unsplit), (partials + 255) / 256 * 256);
}

TEST(FmhaBackwardSplit, MultiQueryAttentionOverFewKeyTilesSplitsAutomaticallyAndTheSameInBothModes) {
  const auto* kernel = bf16_d64_box_kernel();
  if (kernel == nullptr) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  std::vector<int64_t> q_extents{1, 1024, 8, 64}, kv_extents{1, 1024, 1, 64}, lse_extents{1, 1024, 8};
  AttentionBackward p = fake_problem(q_extents, kv_extents, lse_extents);
  const detail::AttentionShape shape = detail::describe_attention(p.q, p.k, p.v, p.scale);
  p.deterministic = false;
  const int32_t fast = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132).params.kv_splits;
  p.deterministic = true;
  const int32_t exact = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132).params.kv_splits;
  EXPECT_GT(fast, 1) << "8 or 16 KV tiles with 8 query heads each leave most of 132 SMs idle";
  EXPECT_EQ(fast, exact) << "the modes must split alike (grad_k and grad_v stay equal between them)";
  p.split_workspace_limit = 0;
  EXPECT_EQ(cuda::fmha::make_backward_launch(p, shape, kernel->config, 132).params.kv_splits, 1);
  p.split_workspace_limit = -1;
  EXPECT_EQ(cuda::fmha::make_backward_launch(p, shape, kernel->config, 0).params.kv_splits, 1)
      << "no device size known: no automatic split";
}

TEST(FmhaBackwardSplit, VisitEstimateFollowsTheMask) {
  const auto* kernel = bf16_d64_box_kernel();
  if (kernel == nullptr) GTEST_SKIP() << "bf16 head dim 64 not compiled";
  std::vector<int64_t> q_extents{1, 4096, 4, 64}, kv_extents{1, 4096, 2, 64}, lse_extents{1, 4096, 4};
  AttentionBackward p = fake_problem(q_extents, kv_extents, lse_extents);
  const detail::AttentionShape shape = detail::describe_attention(p.q, p.k, p.v, p.scale);
  p.kv_splits = 1;
  const auto dense = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132);
  const double q_tiles = 4096.0 / kernel->config.block_m;
  EXPECT_DOUBLE_EQ(cuda::fmha::backward_visits_per_kv_tile(dense.params, cuda::fmha::FmhaBackwardPolicy::box),
                   2 * q_tiles)
      << "dense: every Q tile, for both query heads of the group";
  p.mask = causal_mask();
  const auto causal = cuda::fmha::make_backward_launch(p, shape, kernel->config, 132);
  const double causal_visits =
      cuda::fmha::backward_visits_per_kv_tile(causal.params, cuda::fmha::FmhaBackwardPolicy::box);
  EXPECT_GT(causal_visits, 0.4 * 2 * q_tiles);
  EXPECT_LT(causal_visits, 0.7 * 2 * q_tiles) << "causal: about half of the Q tiles on average";
}

// The launch of a bf16 D128 box problem over `tokens` (one batch, `heads` heads) with `mask` on 132 SMs.
cuda::fmha::FmhaBackwardParams ordered_launch(const std::vector<int64_t>& tokens, const AttentionMask& mask,
                                              int64_t heads = 2) {
  const cuda::fmha::FmhaBackwardKernel* kernel = nullptr;
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.dtype == DType::bf16 && k.config.head_dim == 128 &&
        k.config.policy == cuda::fmha::FmhaBackwardPolicy::box) {
      kernel = &k;
      break;
    }
  }
  cuda::fmha::FmhaBackwardParams none;
  if (kernel == nullptr) return none;
  std::vector<int64_t> q_extents{1}, lse_extents{1};
  q_extents.insert(q_extents.end(), tokens.begin(), tokens.end());
  lse_extents.insert(lse_extents.end(), tokens.begin(), tokens.end());
  q_extents.insert(q_extents.end(), {heads, 128});
  lse_extents.push_back(heads);
  const Device gpu{DeviceType::cuda, 0};
  void* fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  AttentionBackward p;
  const auto rank = static_cast<int>(q_extents.size());
  p.q = p.out = p.grad_out = p.grad_q = p.k = p.v = p.grad_k = p.grad_v =
      make_view(fake, DType::bf16, rank, q_extents.data(), gpu);
  p.lse = make_view(fake, DType::f32, rank - 1, lse_extents.data(), gpu);
  p.mask = mask;
  const detail::AttentionShape shape = detail::describe_attention(p.q, p.k, p.v, p.scale);
  return cuda::fmha::make_backward_launch(p, shape, kernel->config, 132).params;
}

bool have_bf16_d128_box() { return ordered_launch({256}, AttentionMask{}).total_kv_tiles > 0; }

TEST(FmhaBackwardLaunchOrder, DenseAndCausalKeepTheTilesOwnOrder) {
  if (!have_bf16_d128_box()) GTEST_SKIP() << "bf16 head dim 128 not compiled";
  EXPECT_EQ(ordered_launch({4096}, AttentionMask{}).kv_order.positions, 0) << "dense: every tile alike";
  EXPECT_EQ(ordered_launch({4096}, causal_mask()).kv_order.positions, 0)
      << "causal: the first KV tiles are seen by the most Q tiles, already heaviest first";
}

TEST(FmhaBackwardLaunchOrder, NeighborhoodTilesLaunchHeaviestFirstAsAPermutation) {
  if (!have_bf16_d128_box()) GTEST_SKIP() << "bf16 head dim 128 not compiled";
  for (const auto& [tokens, mask] :
       std::vector<std::pair<std::vector<int64_t>, AttentionMask> >{{{128, 128}, neighborhood_mask({31, 31})},
                                                                    {{16, 64, 64}, neighborhood_mask({7, 15, 15})},
                                                                    {{60, 70}, neighborhood_mask({9, 13}, {2, 3})}}) {
    SCOPED_TRACE(testing::Message() << "extents " << tokens.size() << "-D, first " << tokens[0]);
    const auto p = ordered_launch(tokens, mask);
    const int32_t positions = p.kv_tiles[0] * p.kv_tiles[1] * p.kv_tiles[2];
    ASSERT_EQ(p.kv_order.positions, positions) << "the clamped windows give edge-near tiles more work";
    EXPECT_EQ(p.kv_order.groups * positions, p.total_kv_tiles);
    const std::vector<double> work = cuda::fmha::kv_position_work(p);
    std::vector<bool> seen(static_cast<size_t>(positions), false);
    for (int32_t i = 0; i < positions; ++i) {
      const uint16_t at = p.kv_order.position[i];
      ASSERT_LT(at, positions);
      EXPECT_FALSE(seen[at]) << "position " << at << " launched twice";
      seen[at] = true;
      if (i > 0) {
        EXPECT_GE(work[p.kv_order.position[i - 1]], work[at]) << "rank " << i;
      }
    }
    EXPECT_GT(work[p.kv_order.position[0]], work[p.kv_order.position[positions - 1]]);
  }
}

TEST(FmhaBackwardLaunchOrder, OnlyThePairsOfTheLastWaveAreOrdered) {
  if (!have_bf16_d128_box()) GTEST_SKIP() << "bf16 head dim 128 not compiled";
  const auto p = ordered_launch({128, 128}, neighborhood_mask({31, 31}), 16);
  ASSERT_EQ(p.kv_splits, 1);
  ASSERT_EQ(p.total_kv_tiles, 128);
  EXPECT_EQ(p.kv_order.first_head, 14) << "the last 132 of 16 x 128 CTAs: all of head 15 and 4 of head 14";
  const auto one = ordered_launch({128, 128}, neighborhood_mask({31, 31}), 1);
  EXPECT_EQ(one.kv_order.first_head, 0) << "a grid under one wave is ordered whole";
}

TEST(FmhaBackwardLaunchOrder, TheWorkModelCountsTheQTilesMeetingAKeyTile) {
  if (!have_bf16_d128_box()) GTEST_SKIP() << "bf16 head dim 128 not compiled";
  const auto p = ordered_launch({1024}, neighborhood_mask({257}));
  const std::vector<double> work = cuda::fmha::kv_position_work(p);
  ASSERT_EQ(work.size(), static_cast<size_t>(p.kv_tiles[0]));
  // A KV tile of keys [k0, k0 + n): brute force over the queries whose clamped window meets it. Fast mode
  // walks Q tiles of m from the first such query when that takes fewer of them than the tiles aligned to m
  // (moved back to end at query 1024), else the aligned ones.
  ASSERT_EQ(p.q_tile_origins, cuda::KvTileOrigin::window);
  const int64_t n = int64_t{1} << p.kv_space.box_log2[0];
  const int64_t m = int64_t{1} << p.q_space.box_log2[0];
  auto sees = [](int64_t i, int64_t k) {
    const int64_t start = std::clamp<int64_t>(i - 128, 0, 1024 - 257);
    return k >= start && k < start + 257;
  };
  for (int64_t t = 0; t < p.kv_tiles[0]; ++t) {
    int64_t first = 1024, end = 0;
    for (int64_t i = 0; i < 1024; ++i) {
      for (int64_t k = t * n; k < (t + 1) * n; ++k) {
        if (sees(i, k)) {
          first = std::min(first, i);
          end = std::max(end, i + 1);
        }
      }
    }
    const int64_t aligned = (end + m - 1) / m - first / m;
    const int64_t fewest = (end - first + m - 1) / m;
    const int64_t origin = fewest < aligned ? std::min(first, 1024 - fewest * m) : first / m * m;
    double visits = 0, full = 0;
    for (int64_t q0 = origin; q0 < origin + std::min(fewest, aligned) * m; q0 += m) {
      bool meets = false, every = true;
      for (int64_t i = q0; i < std::min<int64_t>(q0 + m, 1024); ++i) {
        for (int64_t k = t * n; k < (t + 1) * n; ++k) {
          const bool in = sees(i, k);
          meets = meets || in;
          every = every && in;
        }
      }
      visits += meets ? 1 : 0;
      full += meets && every ? 1 : 0;
    }
    EXPECT_DOUBLE_EQ(work[static_cast<size_t>(t)], visits + cuda::fmha::kPartialVisitExtra * (visits - full))
        << "KV tile " << t;
  }
}

TEST(FmhaBackwardLaunchOrder, TooManyPositionsKeepTheTilesOwnOrder) {
  if (!have_bf16_d128_box()) GTEST_SKIP() << "bf16 head dim 128 not compiled";
  const auto p = ordered_launch({200000}, neighborhood_mask({2049}));
  EXPECT_GT(p.kv_tiles[0], cuda::fmha::kMaxOrderedKvPositions);
  EXPECT_EQ(p.kv_order.positions, 0) << "the order table holds kMaxOrderedKvPositions positions";
}

#endif

}  // namespace
}  // namespace attnkit
