// The CUDA forward's config space and dispatch (src/cuda/tune): one tuner config per compiled kernel,
// the default is the registry's (for neighborhoods: the tile with the least efficiency-weighted work), wrong
// dtype/width/policy configs are rejected, the estimate counts box visits for neighborhood masks; on a GPU, a call
// whose stream is capturing a CUDA graph never tunes, a tuned call computes what the default computes, and the runner
// times every valid config. Without CUDA every test skips; the GPU tests skip without a device.
#include <gtest/gtest.h>

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnkit/tuner.hpp"
#include "core/float_convert.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda_test_support.hpp"
#include "tune/candidate_ranking.hpp"
#include "tune/process_tuners.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(TunerCuda, SkipsWithoutCuda) { GTEST_SKIP() << "this build has no CUDA backend"; }

#else

using cuda::fmha::fmha_forward_kernels;
using cuda::fmha::fmha_forward_space;

tune::ProblemSpec dense_spec(DType dtype, int64_t head_dim, int64_t tokens, MaskKind mask) {
  tune::ProblemSpec s;
  s.op = tune::TuneOp::attention_forward;
  s.dtype = dtype;
  s.batch = 2;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = s.head_dim_v = head_dim;
  s.tokens = s.tokens_kv = {tokens, 1, 1};
  s.mask = mask;
  if (mask == MaskKind::block) s.block_q = s.block_k = 64;
  return s;
}

bool has_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

TEST(TunerCuda, ForwardSpaceHasOneConfigPerCompiledKernel) {
  std::set<std::string> names;
  for (const auto& kernel : fmha_forward_kernels()) names.insert(cuda::fmha::fmha_config_name(kernel.config));
  const tune::ConfigSpace space = fmha_forward_space();
  ASSERT_EQ(space.configs.size(), names.size());
  for (const auto& config : space.configs) {
    const auto* kernel = cuda::fmha::fmha_forward_kernel_by_name(config.id);
    ASSERT_NE(kernel, nullptr) << config.id;
    EXPECT_EQ(config.resources.smem_bytes, kernel->config.smem_bytes);
    EXPECT_EQ(config.resources.threads, kernel->config.warps * 32);
    EXPECT_EQ(config.param("block_m"), kernel->config.block_m);
  }
  EXPECT_NE(tune::builtin_config_spaces().find(tune::TuneOp::attention_forward, Backend::cuda), nullptr);
}

// The tuner's default is the dispatcher's (fmha_forward_default_for): the registry's first kernel of the problem's
// dtype, width and policy, except dense and causal D 64, which may take the Hopper kernel of 192 query rows (short
// causal masks the one of 64, short dense ones the one of two CTAs per SM).
TEST(TunerCuda, DefaultConfigIsTheDispatchersDefault) {
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::DeviceLimits limits = tune::cuda_device_limits(90, 132);
  const cuda::fmha::FmhaDevice device{limits.compute_capability, static_cast<int>(limits.max_smem_per_block),
                                      static_cast<int>(limits.processors)};
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const int64_t head_dim : {64, 128}) {
      for (const MaskKind mask : {MaskKind::none, MaskKind::causal, MaskKind::block}) {
        const tune::ProblemSpec spec = dense_spec(dtype, head_dim, 1000, mask);
        const auto* registry = cuda::fmha::fmha_default_kernel(
            dtype, head_dim, head_dim,
            mask == MaskKind::block ? cuda::fmha::FmhaPolicyKind::tile_list : cuda::fmha::FmhaPolicyKind::box, device);
        if (registry == nullptr) continue;
        const auto* expected = cuda::fmha::fmha_forward_default_for(spec, device);
        ASSERT_NE(expected, nullptr);
        if (head_dim != 64 || mask == MaskKind::block) {
          EXPECT_EQ(expected, registry);
        } else {
          EXPECT_TRUE(expected == registry || expected->config.block_m == 192 ||
                      (mask == MaskKind::causal && expected->config.block_m == 64) ||
                      (mask == MaskKind::none && expected->config.ctas_per_sm == 2))
              << cuda::fmha::fmha_config_name(expected->config);
        }
        const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
        const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
        ASSERT_NE(chosen, nullptr);
        EXPECT_EQ(chosen->id, cuda::fmha::fmha_config_name(expected->config));
      }
    }
  }
}

tune::ProblemSpec na2d_spec(int64_t extent, int64_t kernel_size) {
  tune::ProblemSpec s = dense_spec(DType::bf16, 128, extent, MaskKind::neighborhood);
  s.batch = 4;
  s.heads_q = s.heads_kv = 16;
  s.token_dims = 2;
  s.tokens = s.tokens_kv = {extent, extent, 1};
  for (int d = 0; d < 2; ++d) s.neighborhood[static_cast<size_t>(d)] = NeighborhoodDim{kernel_size, 1, 1, false};
  return s;
}

// An undilated 3-D window over extents {t, h, w} at head dim `head_dim`, 8 batches of 8 heads.
tune::ProblemSpec na3d_spec(int64_t head_dim, const std::array<int64_t, 3>& extents,
                            const std::array<int64_t, 3>& window) {
  tune::ProblemSpec s = dense_spec(DType::bf16, head_dim, extents[0], MaskKind::neighborhood);
  s.batch = s.heads_q = s.heads_kv = 8;
  s.token_dims = 3;
  s.tokens = s.tokens_kv = extents;
  for (size_t d = 0; d < 3; ++d) s.neighborhood[d] = NeighborhoodDim{window[d], 1, 1, false};
  return s;
}

// The portable tier's 64-row alternative of the bf16 width-128 box kernel, or nullptr (the dev kernel set has none).
const cuda::fmha::FmhaKernel* small_box_alternative() {
  for (const auto& k : fmha_forward_kernels()) {
    if (k.config.architecture == 80 && k.config.dtype == DType::bf16 && k.config.head_dim == 128 &&
        k.config.policy == cuda::fmha::FmhaPolicyKind::box && k.config.block_m == 64) {
      return &k;
    }
  }
  return nullptr;
}

TEST(TunerCuda, NeighborhoodDefaultWeighsVisitedWorkByTileEfficiency) {
  const cuda::fmha::FmhaKernel* small = small_box_alternative();
  if (small == nullptr) GTEST_SKIP() << "this kernel set has no 64-row bf16 d128 box tile (build the full set)";
  const tune::ConfigSpace space = fmha_forward_space();
  // An SM80 device: the portable tiles only (the Hopper tier needs compute capability 9.0).
  const tune::DeviceLimits limits = tune::cuda_device_limits(80, 108);
  auto default_for = [&](const tune::ProblemSpec& spec) {
    const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
    const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
    return chosen == nullptr ? std::string() : chosen->id;
  };
  const std::string small_name = cuda::fmha::fmha_config_name(small->config);
  // Small windows on small images: 64x64 boxes waste less of each visited tile (measured +18 % on H100).
  EXPECT_EQ(default_for(na2d_spec(64, 13)), small_name);
  EXPECT_EQ(default_for(na2d_spec(96, 13)), small_name);
  // Dense work and large windows keep the 128-row tile (32 rows per warp).
  EXPECT_NE(default_for(dense_spec(DType::bf16, 128, 16384, MaskKind::none)), small_name);
  tune::ProblemSpec large_window = dense_spec(DType::bf16, 128, 32768, MaskKind::neighborhood);
  large_window.heads_q = large_window.heads_kv = 16;
  large_window.neighborhood[0] = NeighborhoodDim{2049, 1, 1, false};
  EXPECT_NE(default_for(large_window), small_name);
  // A pure function of the problem.
  EXPECT_EQ(default_for(na2d_spec(64, 13)), default_for(na2d_spec(64, 13)));
}

// On 9.0 the Hopper kernels that run several heads per CTA (D <= 64) stay the neighborhood default even where the
// portable 128 x 64 tile visits half the keys (dilated 7 x 7 groups: one 64-key tile against one of 128), since
// their per-CTA cost is shared by the heads; the visited-work model still decides among the portable tiles.
TEST(TunerCuda, HopperKernelsRunningSeveralHeadsPerCtaStayTheNeighborhoodDefault) {
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::DeviceLimits limits = tune::cuda_device_limits(90, 132);
  for (int64_t head_dim : {32, 64}) {
    SCOPED_TRACE("head dim " + std::to_string(head_dim));
    tune::ProblemSpec spec = na2d_spec(56, 7);
    spec.head_dim = spec.head_dim_v = head_dim;
    spec.batch = 32;
    spec.heads_q = spec.heads_kv = 4;
    for (int d = 0; d < 2; ++d) spec.neighborhood[static_cast<size_t>(d)].dilation = 8;
    const cuda::fmha::FmhaKernel* hopper = cuda::fmha::fmha_default_kernel(
        spec.dtype, head_dim, head_dim, cuda::fmha::FmhaPolicyKind::box,
        cuda::fmha::FmhaDevice{limits.compute_capability, static_cast<int>(limits.max_smem_per_block)});
    if (hopper == nullptr || hopper->config.architecture != 90 || hopper->config.head_dim != head_dim) {
      GTEST_SKIP() << "no Hopper bf16 box kernel of this width in this build";
    }
    const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
    const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
    ASSERT_NE(chosen, nullptr);
    const cuda::fmha::FmhaKernel* entry = cuda::fmha::forward_kernel_of(*chosen);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->config.architecture, 90) << chosen->id;
    EXPECT_EQ(entry->config.head_dim, head_dim) << chosen->id;
  }
}

// The Hopper box kernel of `dtype` and `head_dim` with `block_m` query rows and `ctas_per_sm` CTAs per SM, where the
// build has one.
const cuda::fmha::FmhaKernel* hopper_box_kernel(DType dtype, int head_dim, int block_m, int ctas_per_sm) {
  for (const auto& k : fmha_forward_kernels()) {
    if (k.config.architecture == 90 && k.config.block_m == block_m && k.config.ctas_per_sm == ctas_per_sm &&
        k.config.dtype == dtype && k.config.head_dim == head_dim &&
        k.config.policy == cuda::fmha::FmhaPolicyKind::box) {
      return &k;
    }
  }
  return nullptr;
}

// A square 2-D window stage: side² tokens, K x K, the dilation on both axes, batch x heads, head dim `head_dim`.
struct WindowStage {
  int side;
  int kernel;
  int dilation;
  int64_t batch;
  int64_t heads;
};
tune::ProblemSpec window_stage_spec(const WindowStage& stage, int64_t head_dim) {
  tune::ProblemSpec spec = na2d_spec(stage.side, stage.kernel);
  spec.head_dim = spec.head_dim_v = head_dim;
  spec.batch = stage.batch;
  spec.heads_q = spec.heads_kv = stage.heads;
  for (int d = 0; d < 2; ++d) spec.neighborhood[static_cast<size_t>(d)].dilation = stage.dilation;
  return spec;
}
std::string window_stage_name(const WindowStage& stage) {
  return "na2d " + std::to_string(stage.side) + "^2 K" + std::to_string(stage.kernel) + " dilation " +
         std::to_string(stage.dilation);
}

// A 1-D window of `kernel_size` keys over 8192 tokens, 4 batches of 16 heads.
tune::ProblemSpec na1d_spec(int64_t head_dim, int64_t kernel_size, bool causal) {
  tune::ProblemSpec s = dense_spec(DType::bf16, head_dim, 8192, MaskKind::neighborhood);
  s.batch = 4;
  s.heads_q = s.heads_kv = 16;
  s.neighborhood[0] = NeighborhoodDim{kernel_size, 1, 1, causal};
  return s;
}

// The id of the default config for `spec` on `limits` ("" when there is none).
std::string default_config_id(const tune::ConfigSpace& space, const tune::ProblemSpec& spec,
                              const tune::DeviceLimits& limits) {
  const tune::Config* chosen = tune::default_config(space, tune::rank_candidates(space, spec, limits), spec, limits);
  return chosen == nullptr ? std::string() : chosen->id;
}

// The id of the forward default for `spec` on a compute-capability 9.0 device of 132 SMs.
std::string hopper_default_of(const tune::ProblemSpec& spec) {
  return default_config_id(fmha_forward_space(), spec, tune::cuda_device_limits(90, 132));
}

TEST(TunerCuda, HopperWindowsOfUpTo2048KeysDefaultToTheKernelOf64QueryRows) {
  for (int head_dim : {32, 64}) {
    SCOPED_TRACE("head dim " + std::to_string(head_dim));
    const cuda::fmha::FmhaKernel* rows_64 = hopper_box_kernel(DType::bf16, head_dim, 64, 4);
    if (rows_64 == nullptr) GTEST_SKIP() << "this build compiles no Hopper bf16 kernel of 64 query rows";
    const std::string rows_64_name = cuda::fmha::fmha_config_name(rows_64->config);
    // 2-D: NAT/DiNAT stages, undilated and dilated, a single head, and a large window (961 keys).
    for (const WindowStage& stage :
         {WindowStage{56, 7, 1, 64, 2}, WindowStage{28, 7, 4, 64, 4}, WindowStage{14, 7, 2, 64, 8},
          WindowStage{32, 3, 1, 32, 8}, WindowStage{45, 13, 3, 1, 1}, WindowStage{128, 31, 1, 1, 16}}) {
      SCOPED_TRACE(window_stage_name(stage));
      EXPECT_EQ(hopper_default_of(window_stage_spec(stage, head_dim)), rows_64_name);
    }
    // 3-D video windows, and 1-D windows up to the bound, causal and not.
    EXPECT_EQ(hopper_default_of(na3d_spec(head_dim, {8, 32, 32}, {3, 7, 7})), rows_64_name) << "na3d 8x32x32 K3x7x7";
    EXPECT_EQ(hopper_default_of(na3d_spec(head_dim, {16, 16, 16}, {3, 3, 3})), rows_64_name) << "na3d 16^3 K3";
    EXPECT_EQ(hopper_default_of(na1d_spec(head_dim, 256, true)), rows_64_name) << "na1d K256 causal";
    EXPECT_EQ(hopper_default_of(na1d_spec(head_dim, 2048, false)), rows_64_name) << "na1d K2048";
    // Beyond 2048 keys the 128-row kernels stay (the next tests), as they do for dense attention.
    EXPECT_NE(hopper_default_of(na1d_spec(head_dim, 2049, false)), rows_64_name) << "na1d K2049";
    EXPECT_NE(hopper_default_of(na3d_spec(head_dim, {16, 64, 64}, {9, 15, 17})), rows_64_name) << "na3d K9x15x17";
    const std::string dense_choice = hopper_default_of(dense_spec(DType::bf16, head_dim, 2048, MaskKind::none));
    EXPECT_FALSE(dense_choice.empty());
    EXPECT_NE(dense_choice, rows_64_name);
  }
  // On an 8.x device the rule has nothing to pick: the portable tier's default stays.
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::DeviceLimits ampere = tune::cuda_device_limits(80, 108);
  tune::ProblemSpec window = na2d_spec(28, 7);
  window.head_dim = window.head_dim_v = 32;
  const tune::Config* on_ampere =
      tune::default_config(space, tune::rank_candidates(space, window, ampere), window, ampere);
  ASSERT_NE(on_ampere, nullptr);
  EXPECT_EQ(cuda::fmha::forward_kernel_of(*on_ampere)->config.architecture, 80) << on_ampere->id;
}

// The names of two Hopper bf16 box kernels of `head_dim` (query rows, CTAs per SM each); `found` false where the
// build lacks either.
struct HopperKernelPair {
  std::string first;
  std::string second;
  bool found = false;
};

HopperKernelPair hopper_box_kernels(int head_dim, int rows_first, int ctas_first, int rows_second, int ctas_second) {
  const cuda::fmha::FmhaKernel* first = hopper_box_kernel(DType::bf16, head_dim, rows_first, ctas_first);
  const cuda::fmha::FmhaKernel* second = hopper_box_kernel(DType::bf16, head_dim, rows_second, ctas_second);
  if (first == nullptr || second == nullptr) return {};
  return {cuda::fmha::fmha_config_name(first->config), cuda::fmha::fmha_config_name(second->config), true};
}

TEST(TunerCuda, HopperD128WindowsOfUpTo384KeysDefaultToTheKernelOf64QueryRows) {
  const HopperKernelPair kernels = hopper_box_kernels(128, 64, 2, 128, 1);
  if (!kernels.found) GTEST_SKIP() << "this build compiles no Hopper bf16 D128 box kernels";
  const std::string& rows_64_name = kernels.first;
  const std::string& rows_128_name = kernels.second;
  // Small windows, dilated too (where the visited-work model would pick a portable tile), up to 19² = 361 keys, and
  // 1-D up to 384 keys.
  for (const WindowStage& stage :
       {WindowStage{32, 7, 1, 16, 8}, WindowStage{56, 7, 1, 32, 4}, WindowStage{28, 7, 4, 16, 8},
        WindowStage{64, 13, 1, 4, 16}, WindowStage{64, 17, 1, 4, 16}, WindowStage{32, 19, 1, 16, 8}}) {
    SCOPED_TRACE(window_stage_name(stage));
    EXPECT_EQ(hopper_default_of(window_stage_spec(stage, 128)), rows_64_name);
  }
  EXPECT_EQ(hopper_default_of(na3d_spec(128, {16, 16, 16}, {3, 3, 3})), rows_64_name) << "na3d 16^3 K3";
  EXPECT_EQ(hopper_default_of(na1d_spec(128, 256, true)), rows_64_name) << "na1d K256 causal";
  EXPECT_EQ(hopper_default_of(na1d_spec(128, 384, true)), rows_64_name) << "na1d K384 causal";
  // From 385 keys the 128 x 128 kernel: large 2-D, 3-D and 1-D windows.
  EXPECT_EQ(hopper_default_of(window_stage_spec(WindowStage{96, 21, 1, 4, 16}, 128)), rows_128_name) << "na2d 96^2 K21";
  EXPECT_EQ(hopper_default_of(window_stage_spec(WindowStage{128, 31, 1, 1, 16}, 128)), rows_128_name)
      << "na2d 128^2 K31";
  EXPECT_EQ(hopper_default_of(na3d_spec(128, {16, 64, 64}, {7, 15, 15})), rows_128_name) << "na3d K7x15x15";
  EXPECT_EQ(hopper_default_of(na1d_spec(128, 385, false)), rows_128_name) << "na1d K385";
  EXPECT_EQ(hopper_default_of(na1d_spec(128, 512, false)), rows_128_name) << "na1d K512";
  EXPECT_EQ(hopper_default_of(na1d_spec(128, 1024, false)), rows_128_name) << "na1d K1024";
  EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 128, 1024, MaskKind::none)), rows_128_name) << "dense S1024";
}

TEST(TunerCuda, HopperD32WindowsBeyond2048KeysDefaultToTheKernelOfTwoCtasPerSmWhereItKeepsTheQueryBoxes) {
  const cuda::fmha::FmhaKernel* two_ctas = hopper_box_kernel(DType::bf16, 32, 128, 2);
  if (two_ctas == nullptr) GTEST_SKIP() << "this build compiles no Hopper bf16 D32 kernel of two CTAs per SM";
  const std::string two_cta_name = cuda::fmha::fmha_config_name(two_ctas->config);
  EXPECT_EQ(hopper_default_of(window_stage_spec(WindowStage{96, 47, 1, 2, 8}, 32)), two_cta_name) << "na2d 96^2 K47";
  EXPECT_EQ(hopper_default_of(na1d_spec(32, 4096, false)), two_cta_name) << "na1d K4096";
  // 3-D windows take it where its 64-key boxes keep the 128-key kernel's query boxes (16x64x64 K9x15x17: 8x2x8),
  // not where they change them (16x64x64 K13x13x13: 8x4x4 against 16x2x4).
  EXPECT_EQ(hopper_default_of(na3d_spec(32, {16, 64, 64}, {9, 15, 17})), two_cta_name) << "na3d K9x15x17";
  const std::string changed = hopper_default_of(na3d_spec(32, {16, 64, 64}, {13, 13, 13}));
  EXPECT_NE(changed, two_cta_name);
  EXPECT_NE(changed.find("_sm90"), std::string::npos) << changed;
  // Dense D 32 keeps the registry's first Hopper kernel (one CTA per SM): the rule is for windows.
  EXPECT_NE(hopper_default_of(dense_spec(DType::bf16, 32, 4096, MaskKind::none)), two_cta_name);
}

// Dense and causal D 64 on Hopper: the kernel of 192 query rows where its visited work at 0.85 of the cost per row
// is less than the 128-row kernels' (the two-CTA one's at its own cost): dense from a single tile up but where 192-row
// tiles pad most, causal beyond 2048 keys (up to them, D 32 and 64 run on the kernel of 64 query rows); never for
// neighborhood masks, D 128, or a forced kernel.
TEST(TunerCuda, HopperD64DenseAndCausalDefaultToTheKernelOf192RowsWhereItsVisitedWorkIsLess) {
  const HopperKernelPair kernels = hopper_box_kernels(64, 192, 1, 128, 1);
  if (!kernels.found) GTEST_SKIP() << "this build compiles no Hopper bf16 D64 box kernels";
  const std::string& rows_192_name = kernels.first;
  const std::string& rows_128_name = kernels.second;
  for (const int64_t tokens : {129, 192, 384, 768, 1000, 1024, 2048, 3000, 8192}) {
    EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 64, tokens, MaskKind::none)), rows_192_name) << tokens;
  }
  // Dense D 64 where 192-row tiles pad most: the kernel of two CTAs per SM (128 rows, 64-key tiles), whose second CTA
  // hides the first's fixed cost on short KV loops (up to 128 tokens; 200: two tiles of 192, 384 rows, against two of
  // 128; 512: three of 192 against four of 128; 640, 800).
  const cuda::fmha::FmhaKernel* two_ctas = hopper_box_kernel(DType::bf16, 64, 128, 2);
  if (two_ctas != nullptr) {
    for (const int64_t tokens : {1, 128, 200, 256, 512, 640, 800}) {
      EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 64, tokens, MaskKind::none)),
                cuda::fmha::fmha_config_name(two_ctas->config))
          << tokens;
    }
    EXPECT_NE(hopper_default_of(dense_spec(DType::bf16, 32, 512, MaskKind::none)),
              cuda::fmha::fmha_config_name(two_ctas->config))
        << "D 32 dense keeps the registry's first kernel";
  }
  // Causal masks of up to 2048 keys: the kernel of 64 query rows (four CTAs per SM), at D 32 too; beyond, 192 rows.
  const cuda::fmha::FmhaKernel* rows_64 = hopper_box_kernel(DType::bf16, 64, 64, 4);
  const cuda::fmha::FmhaKernel* rows_64_d32 = hopper_box_kernel(DType::bf16, 32, 64, 4);
  ASSERT_NE(rows_64, nullptr) << "a build with the D 64 kernels of 192 rows has those of 64 rows";
  for (const int64_t tokens : {1, 100, 512, 768, 1024, 2048}) {
    EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 64, tokens, MaskKind::causal)),
              cuda::fmha::fmha_config_name(rows_64->config))
        << tokens;
    if (rows_64_d32 != nullptr) {
      EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 32, tokens, MaskKind::causal)),
                cuda::fmha::fmha_config_name(rows_64_d32->config))
          << tokens;
    }
  }
  for (const int64_t tokens : {2049, 4096, 8192}) {
    EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 64, tokens, MaskKind::causal)), rows_192_name) << tokens;
  }
  if (const cuda::fmha::FmhaKernel* rows_64_d128 = hopper_box_kernel(DType::bf16, 128, 64, 2)) {
    EXPECT_NE(hopper_default_of(dense_spec(DType::bf16, 128, 1024, MaskKind::causal)),
              cuda::fmha::fmha_config_name(rows_64_d128->config))
        << "D 128 causal keeps the larger kernels";
  }
  // 1-D windows beyond 2048 keys (those up to it run on the 64-row kernel), causal or not.
  EXPECT_EQ(hopper_default_of(na1d_spec(64, 4096, false)), rows_192_name) << "na1d K4096";
  EXPECT_EQ(hopper_default_of(na1d_spec(64, 2049, true)), rows_192_name) << "na1d K2049 causal";
  EXPECT_NE(hopper_default_of(na1d_spec(64, 2048, false)), rows_192_name) << "na1d K2048";
  EXPECT_NE(hopper_default_of(dense_spec(DType::bf16, 128, 8192, MaskKind::none)), rows_192_name) << "D 128";
  const test::ScopedEnvironment forced("ATTNKIT_FMHA_CONFIG", rows_128_name);
  EXPECT_EQ(hopper_default_of(dense_spec(DType::bf16, 64, 8192, MaskKind::none)), rows_128_name) << "forced";
  // The tuner's space refuses the 192-row kernels for neighborhoods of more than one dimension.
  const tune::ConfigSpace space = fmha_forward_space();
  tune::ProblemSpec window = na2d_spec(28, 7);
  window.head_dim = window.head_dim_v = 64;
  for (const tune::Config& config : space.configs) {
    if (config.id != rows_192_name) continue;
    const std::string reason = space.invalid_reason(config, window, tune::cuda_device_limits(90, 132));
    EXPECT_NE(reason.find("power of two"), std::string::npos) << reason;
  }
}

TEST(TunerCuda, HopperD64WindowsBeyond2048KeysOfOneAndTwoDimensionsDefaultToTheKernelOfTwoCtasPerSm) {
  const cuda::fmha::FmhaKernel* two_ctas = hopper_box_kernel(DType::bf16, 64, 128, 2);
  if (two_ctas == nullptr) GTEST_SKIP() << "this build compiles no Hopper bf16 D64 kernel of two CTAs per SM";
  const std::string two_cta_name = cuda::fmha::fmha_config_name(two_ctas->config);
  EXPECT_EQ(hopper_default_of(window_stage_spec(WindowStage{96, 47, 1, 2, 8}, 64)), two_cta_name) << "na2d 96^2 K47";
  // 1-D windows take the kernel of 192 query rows where the build has one.
  const cuda::fmha::FmhaKernel* rows_192 = hopper_box_kernel(DType::bf16, 64, 192, 1);
  const std::string one_d = rows_192 != nullptr ? cuda::fmha::fmha_config_name(rows_192->config) : two_cta_name;
  EXPECT_EQ(hopper_default_of(na1d_spec(64, 4096, false)), one_d) << "na1d K4096";
  EXPECT_EQ(hopper_default_of(na1d_spec(64, 4096, true)), one_d) << "na1d K4096 causal";
  // 3-D windows keep the one-CTA kernel of 128-key tiles, also where the 64-key boxes keep the query boxes.
  const std::string video_choice = hopper_default_of(na3d_spec(64, {16, 64, 64}, {9, 15, 17}));
  EXPECT_NE(video_choice, two_cta_name);
  EXPECT_NE(video_choice.find("_sm90"), std::string::npos) << video_choice;
  // Dense D 64 keeps the registry's first Hopper kernel: the rule is for windows.
  EXPECT_NE(hopper_default_of(dense_spec(DType::bf16, 64, 2048, MaskKind::none)), two_cta_name);
}

TEST(TunerCuda, HopperTierRunsOnlyOnComputeCapability90) {
  const cuda::fmha::FmhaKernel* hopper = nullptr;
  for (const auto& k : cuda::fmha::fmha_forward_kernels()) {
    if (k.config.architecture == 90 && k.config.block_m == 128 && k.config.dtype == DType::bf16 &&
        k.config.head_dim == 128 && k.config.policy == cuda::fmha::FmhaPolicyKind::box) {
      hopper = &k;
    }
  }
  if (hopper == nullptr) GTEST_SKIP() << "this build compiles no sm_90a code (ATTNKIT_CUDA_ARCHS without 90a)";
  const std::string hopper_name = cuda::fmha::fmha_config_name(hopper->config);
  EXPECT_NE(hopper_name.find("_sm90"), std::string::npos) << hopper_name;
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::ProblemSpec dense = dense_spec(DType::bf16, 128, 16384, MaskKind::none);

  const tune::DeviceLimits hopper_device = tune::cuda_device_limits(90, 132);
  const tune::CandidateRanking on_hopper = tune::rank_candidates(space, dense, hopper_device);
  const tune::Config* chosen = tune::default_config(space, on_hopper, dense, hopper_device);
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->id, hopper_name) << "dense bf16 D128 on a 9.0 device defaults to the Hopper tier";
  tune::ProblemSpec large_window = dense_spec(DType::bf16, 128, 32768, MaskKind::neighborhood);
  large_window.heads_q = large_window.heads_kv = 16;
  large_window.neighborhood[0] = NeighborhoodDim{2049, 1, 1, false};
  const tune::CandidateRanking window_ranking = tune::rank_candidates(space, large_window, hopper_device);
  const tune::Config* window_choice = tune::default_config(space, window_ranking, large_window, hopper_device);
  ASSERT_NE(window_choice, nullptr);
  EXPECT_EQ(window_choice->id, hopper_name) << "large neighborhoods too (na1d K2049: 391 vs 249 TF/s on H100)";

  for (const int capability : {80, 89, 100}) {
    const tune::DeviceLimits other = tune::cuda_device_limits(capability, 100);
    const tune::CandidateRanking ranking = tune::rank_candidates(space, dense, other);
    const tune::Config* fallback = tune::default_config(space, ranking, dense, other);
    ASSERT_NE(fallback, nullptr) << "capability " << capability;
    EXPECT_EQ(fallback->id.find("_sm90"), std::string::npos) << "capability " << capability;
    std::string reason;
    for (const auto& r : ranking.rejected) {
      if (r.config->id == hopper_name) reason = r.reason;
    }
    EXPECT_FALSE(reason.empty()) << "capability " << capability << ": the Hopper config is rejected";
    // With 227 KiB of shared memory (10.0) the tile fits: the reason is the architecture.
    if (capability == 100) {
      EXPECT_NE(reason.find("sm_90a"), std::string::npos) << reason;
    }
    EXPECT_FALSE(cuda::fmha::fmha_config_fits(hopper->config, cuda::fmha::FmhaDevice{capability, 227 * 1024}));
  }
  EXPECT_TRUE(cuda::fmha::fmha_config_fits(hopper->config, cuda::fmha::FmhaDevice{90, 227 * 1024}));
  EXPECT_FALSE(cuda::fmha::fmha_config_fits(hopper->config, cuda::fmha::FmhaDevice{90, 99 * 1024}))
      << "shared memory still bounds it";
}

TEST(TunerCuda, BackwardSpaceDefaultIsTheBackwardRegistryDefault) {
  if (cuda::fmha::fmha_backward_kernels().empty()) GTEST_SKIP() << "no backward kernels in this build";
  const tune::ConfigSpace space = cuda::fmha::fmha_backward_space();
  EXPECT_EQ(space.op, tune::TuneOp::attention_backward);
  const tune::DeviceLimits limits = tune::cuda_device_limits(90, 132);
  tune::ProblemSpec spec = dense_spec(DType::f16, 64, 999, MaskKind::causal);
  spec.op = tune::TuneOp::attention_backward;
  const auto* expected = cuda::fmha::fmha_backward_default_kernel(
      DType::f16, 64, 64, cuda::fmha::FmhaBackwardPolicy::box,
      cuda::fmha::FmhaDevice{limits.compute_capability, static_cast<int>(limits.max_smem_per_block)});
  ASSERT_NE(expected, nullptr);
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
  const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->id, cuda::fmha::fmha_backward_config_name(expected->config));
  EXPECT_NE(tune::builtin_config_spaces().find(tune::TuneOp::attention_backward, Backend::cuda), nullptr);
}

// The Hopper dK/dV kernel of 64-key tiles of `head_dim`, where the build has one.
const cuda::fmha::FmhaBackwardKernel* hopper_backward_kernel_of_64_keys(int head_dim) {
  for (const auto& k : cuda::fmha::fmha_backward_kernels()) {
    if (k.config.architecture == 90 && k.config.block_n == 64 && k.config.dtype == DType::bf16 &&
        k.config.head_dim == head_dim && k.config.policy == cuda::fmha::FmhaBackwardPolicy::box) {
      return &k;
    }
  }
  return nullptr;
}

// The id of the backward default for `spec` on a compute-capability 9.0 device of 132 SMs.
std::string hopper_backward_default_of(tune::ProblemSpec spec) {
  spec.op = tune::TuneOp::attention_backward;
  return default_config_id(cuda::fmha::fmha_backward_space(), spec, tune::cuda_device_limits(90, 132));
}

TEST(TunerCuda, HopperBackwardOfWindowsDefaultsToTheKernelOf64KeyTiles) {
  for (int head_dim : {32, 64}) {
    SCOPED_TRACE("head dim " + std::to_string(head_dim));
    const cuda::fmha::FmhaBackwardKernel* keys_64 = hopper_backward_kernel_of_64_keys(head_dim);
    if (keys_64 == nullptr) GTEST_SKIP() << "this build compiles no Hopper bf16 backward kernel of 64-key tiles";
    const std::string keys_64_name = cuda::fmha::fmha_backward_config_name(keys_64->config);
    // Windows of every size and dimension, dilated and causal.
    for (const WindowStage& stage : {WindowStage{56, 7, 1, 64, 2}, WindowStage{28, 7, 4, 64, 4},
                                     WindowStage{14, 7, 1, 64, 8}, WindowStage{128, 31, 1, 1, 16}}) {
      SCOPED_TRACE(window_stage_name(stage));
      EXPECT_EQ(hopper_backward_default_of(window_stage_spec(stage, head_dim)), keys_64_name);
    }
    EXPECT_EQ(hopper_backward_default_of(na3d_spec(head_dim, {8, 32, 32}, {3, 7, 7})), keys_64_name) << "na3d";
    EXPECT_EQ(hopper_backward_default_of(na1d_spec(head_dim, 4096, true)), keys_64_name) << "na1d K4096 causal";
    // Dense and causal attention keep the 128-key kernel, the registry's first.
    for (const MaskKind mask : {MaskKind::none, MaskKind::causal}) {
      const std::string dense_choice = hopper_backward_default_of(dense_spec(DType::bf16, head_dim, 2048, mask));
      EXPECT_NE(dense_choice, keys_64_name);
      EXPECT_NE(dense_choice.find("_n128_"), std::string::npos) << dense_choice;
    }
  }
  // D 128 has no kernel of 64-key tiles: windows keep the 128-key one.
  const std::string d128 = hopper_backward_default_of(window_stage_spec(WindowStage{56, 7, 1, 32, 4}, 128));
  EXPECT_NE(d128.find("_n128_"), std::string::npos) << d128;
  // On an 8.x device there is nothing to pick: the portable tier's default stays.
  tune::ProblemSpec window = window_stage_spec(WindowStage{28, 7, 1, 64, 4}, 64);
  window.op = tune::TuneOp::attention_backward;
  const std::string on_ampere =
      default_config_id(cuda::fmha::fmha_backward_space(), window, tune::cuda_device_limits(80, 108));
  EXPECT_EQ(on_ampere.find("_sm90"), std::string::npos) << on_ampere;
  EXPECT_FALSE(on_ampere.empty());
}

// The backward's width depends on the device (D 32 has Hopper kernels only): on each device the tuner's
// valid configs are the registry's entries at the width the problem runs on there, and its default is the
// registry's default.
TEST(TunerCuda, BackwardHeadDim32ConfigsAreThoseOfTheWidthItRunsOnPerDevice) {
  if (cuda::fmha::fmha_backward_kernels().empty()) GTEST_SKIP() << "no backward kernels in this build";
  const tune::ConfigSpace space = cuda::fmha::fmha_backward_space();
  for (const int capability : {80, 90}) {
    for (const MaskKind mask : {MaskKind::causal, MaskKind::block}) {
      SCOPED_TRACE("capability " + std::to_string(capability) + (mask == MaskKind::block ? ", block mask" : ""));
      const tune::DeviceLimits limits = tune::cuda_device_limits(capability, 132);
      tune::ProblemSpec spec = dense_spec(DType::bf16, 32, 999, mask);
      spec.op = tune::TuneOp::attention_backward;
      const auto policy = cuda::fmha::fmha_backward_policy_for(mask);
      const cuda::fmha::FmhaDevice device{limits.compute_capability, static_cast<int>(limits.max_smem_per_block)};
      const int width = cuda::fmha::fmha_backward_width_on_device(DType::bf16, 32, 32, policy, device);
      ASSERT_NE(width, 0) << "no backward kernel runs bf16 D 32 here";
      const auto* expected = cuda::fmha::fmha_backward_default_kernel(DType::bf16, 32, 32, policy, device);
      ASSERT_NE(expected, nullptr);
      EXPECT_EQ(expected->config.head_dim, width);
      const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
      ASSERT_FALSE(ranking.valid.empty());
      for (const auto& ranked : ranking.valid) EXPECT_EQ(ranked.config->param("head_dim"), width) << ranked.config->id;
      const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
      ASSERT_NE(chosen, nullptr);
      EXPECT_EQ(chosen->id, cuda::fmha::fmha_backward_config_name(expected->config));
    }
  }
}

TEST(TunerCuda, ConfigsOfAnotherDtypeWidthOrPolicyAreRejected) {
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::ProblemSpec spec = dense_spec(DType::bf16, 64, 777, MaskKind::causal);
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, tune::cuda_device_limits(90, 132));
  ASSERT_FALSE(ranking.valid.empty());
  for (const auto& ranked : ranking.valid) {
    EXPECT_EQ(ranked.config->param("dtype"), static_cast<int64_t>(DType::bf16));
    EXPECT_EQ(ranked.config->param("head_dim"), 64);
    EXPECT_EQ(ranked.config->param("policy"), static_cast<int64_t>(cuda::fmha::FmhaPolicyKind::box));
  }
  EXPECT_EQ(ranking.valid.size() + ranking.rejected.size(), space.configs.size());
}

TEST(TunerCuda, NeighborhoodWorkCountsOnlyTheVisitedBoxes) {
  tune::ProblemSpec na = dense_spec(DType::bf16, 128, 1, MaskKind::neighborhood);
  na.token_dims = 2;
  na.tokens = na.tokens_kv = {96, 96, 1};
  na.neighborhood[0] = {13, 1, 1, false};
  na.neighborhood[1] = {13, 1, 1, false};
  tune::ProblemSpec dense = na;
  dense.mask = MaskKind::none;
  const auto& kernel = fmha_forward_kernels().front().config;
  const tune::TileWork na_work = cuda::fmha::fmha_forward_tile_work(kernel, na);
  const tune::TileWork dense_work = cuda::fmha::fmha_forward_tile_work(kernel, dense);
  EXPECT_EQ(na_work.tiles, dense_work.tiles);  // 9216 tokens in whole tiles either way
  EXPECT_LT(na_work.flops_per_tile, dense_work.flops_per_tile / 4);
  EXPECT_GT(na_work.flops_per_tile, 0.0);
}

// --- GPU ---------------------------------------------------------------------------------------

struct DeviceTensor {
  void* data = nullptr;
  TensorView view;
  DeviceTensor(DType dtype, std::vector<int64_t> extents, std::mt19937_64* rng) {
    int64_t n = 1;
    for (const int64_t e : extents) n *= e;
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
    if (cudaMalloc(&data, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    std::vector<unsigned char> host(bytes, 0xff);  // NaN in f16/bf16/f32 until written
    if (rng != nullptr) {
      std::uniform_real_distribution<double> uniform(-1.0, 1.0);
      for (int64_t i = 0; i < n; ++i) detail::store_from_double(host.data(), dtype, i, uniform(*rng));
    }
    cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice);
    view = make_view(data, dtype, static_cast<int32_t>(extents.size()), extents.data(), Device{DeviceType::cuda, 0});
  }
  ~DeviceTensor() { cudaFree(data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  std::vector<double> to_host() const {
    std::vector<unsigned char> host(static_cast<size_t>(view.numel()) * dtype_size(view.dtype));
    cudaMemcpy(host.data(), data, host.size(), cudaMemcpyDeviceToHost);
    std::vector<double> values;
    for (int64_t i = 0; i < view.numel(); ++i) values.push_back(detail::load_as_double(host.data(), view.dtype, i));
    return values;
  }
};

class TunerCudaGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
    tune::reset_process_tuners();
    TunerSettings s;
    s.mode = TuneMode::on;
    s.warmup_steps_forward = 1;
    s.steps_forward = 3;
    s.cache_dir = "";
    configure_tuner(s);
  }
  void TearDown() override { tune::reset_process_tuners(); }
};

TEST_F(TunerCudaGpu, ACallOnACapturingStreamNeverTunes) {
  std::mt19937_64 rng(1);
  DeviceTensor q(DType::bf16, {1, 333, 2, 64}, &rng), k(DType::bf16, {1, 333, 2, 64}, &rng),
      v(DType::bf16, {1, 333, 2, 64}, &rng), out(DType::bf16, {1, 333, 2, 64}, nullptr);
  AttentionForward f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out.view;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  RunOptions options;
  options.backend = Backend::cuda;
  options.stream = stream;
  test::StreamCapture capture(stream);
  ASSERT_TRUE(capture.began()) << "cudaStreamBeginCapture";
  const TunedConfig during = attention_forward_config(f, options);
  cudaGraph_t graph = capture.end();
  ASSERT_NE(graph, nullptr) << "cudaStreamEndCapture";
  cudaGraphDestroy(graph);
  EXPECT_EQ(during.source, "default");
  const TunedConfig after = attention_forward_config(f, options);
  EXPECT_EQ(after.source, "tuned");
  cudaStreamDestroy(stream);
}

TEST_F(TunerCudaGpu, ATunedCallComputesWhatTheDefaultComputes) {
  std::mt19937_64 rng(2);
  DeviceTensor q(DType::bf16, {2, 515, 4, 128}, &rng), k(DType::bf16, {2, 515, 2, 128}, &rng),
      v(DType::bf16, {2, 515, 2, 128}, &rng), tuned_out(DType::bf16, {2, 515, 4, 128}, nullptr),
      default_out(DType::bf16, {2, 515, 4, 128}, nullptr);
  AttentionForward f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.mask.kind = MaskKind::causal;
  RunOptions options;
  options.backend = Backend::cuda;
  f.out = tuned_out.view;
  attention_forward(f, options);
  TunerSettings off = tuner_settings();
  off.mode = TuneMode::off;
  configure_tuner(off);
  f.out = default_out.view;
  attention_forward(f, options);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> a = tuned_out.to_host(), b = default_out.to_host();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << "tuned output not fully written at " << i;
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  EXPECT_LE(std::sqrt(diff / norm), 1.5e-2);
}

TEST_F(TunerCudaGpu, TheRunnerTimesEveryValidConfig) {
  tune::ProblemSpec spec = dense_spec(DType::bf16, 128, 1024, MaskKind::block);
  spec.density = 0.25;
  cuda::fmha::FmhaAttentionRunner runner(spec, 0, cuda::fmha::device_l2_bytes(0));
  EXPECT_GE(runner.buffer_sets(), 2);
  const tune::ConfigSpace space = fmha_forward_space();
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, tune::cuda_device_limits(90, 132));
  ASSERT_FALSE(ranking.valid.empty());
  for (const auto& ranked : ranking.valid) {
    for (int i = 0; i < 3; ++i) EXPECT_GT(runner.measure_seconds(*ranked.config, i), 0.0) << ranked.config->id;
  }
}

TEST_F(TunerCudaGpu, TheRunnerTimesTheBackwardOfEveryValidConfig) {
  if (cuda::fmha::fmha_backward_kernels().empty()) GTEST_SKIP() << "no backward kernels in this build";
  tune::ProblemSpec spec = dense_spec(DType::f16, 64, 700, MaskKind::causal);
  spec.op = tune::TuneOp::attention_backward;
  cuda::fmha::FmhaAttentionRunner runner(spec, 0, cuda::fmha::device_l2_bytes(0));
  const tune::ConfigSpace space = cuda::fmha::fmha_backward_space();
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, tune::cuda_device_limits(90, 132));
  ASSERT_FALSE(ranking.valid.empty());
  for (const auto& ranked : ranking.valid) {
    for (int i = 0; i < 3; ++i) EXPECT_GT(runner.measure_seconds(*ranked.config, i), 0.0) << ranked.config->id;
  }
}

#endif

}  // namespace
}  // namespace attnkit
