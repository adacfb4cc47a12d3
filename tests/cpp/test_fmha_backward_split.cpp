// The automatic KV-parallel split choice of the CUDA backward (src/cuda/fmha/fmha_backward_split.hpp) and
// the workspace its partials take: host-only (no GPU needed), in CUDA builds.
#include <gtest/gtest.h>

#include <cstdint>
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

#endif

}  // namespace
}  // namespace attnkit
