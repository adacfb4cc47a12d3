// The tuner over gemm and retention (issues #21, #22). Everywhere: their problem specs and keys (M and the
// batch bucketed, N and K exact; T and the batch bucketed; each op its own line), problem-file lines, and the
// tuner's rules on these ops with scripted spaces and timings (a non-default replaces the default only when
// it beats it by margin and noise, a cached winner whose records show it losing is dropped, offline tuning of
// a problem list persists them). CUDA builds: the CUDA gemm space (one config per registry entry, the default
// is select_gemm_kernel's choice, validity and estimates) and the retention spaces (stable ids, the default is
// the rule, no two valid configs make the same launches, the estimate prefers segments for few long
// sequences) -- host code, no GPU needed; with a GPU: the runners time every valid config, and a small gemm
// and a small retention forward and backward tuned on the GPU compute what the CPU oracle computes, while a
// forced configuration keeps priority over the tuner.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_tune_support.hpp"
#include "tune/cache_file.hpp"
#include "tune/offline_tuning.hpp"
#include "tune/problem_file.hpp"
#include "tune/problem_key.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "attnkit/tuner.hpp"
#include "core/gemm_plan.hpp"
#include "core/retention_plan.hpp"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_registry.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_jobs.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#include "cuda/tune/gemm_config_space.hpp"
#include "cuda/tune/gemm_tuning_runner.hpp"
#include "cuda/tune/gpu_run_timer.hpp"
#include "cuda/tune/retention_config_space.hpp"
#include "cuda/tune/retention_tuning_runner.hpp"
#include "cuda_test_support.hpp"
#include "test_support.hpp"
#include "tune/candidate_ranking.hpp"
#include "tune/process_tuners.hpp"
#endif

namespace attnkit::tune {
namespace {

using testing::ScriptedRunner;
using testing::TempDir;

// --- problem specs, keys and problem files (every build) ---------------------------------------------

TEST(TuneGemmProblem, TheKeyNamesMNKTheLayoutAndTf32) {
  const ProblemSpec nt = gemm_problem_spec(DType::f16, 1024, 4096, 4096, 1, false, true, true);
  EXPECT_EQ(nt.op, TuneOp::gemm);
  EXPECT_EQ(nt.tokens[0], 1024);
  EXPECT_EQ(nt.tokens_kv[0], 4096);
  EXPECT_EQ(nt.head_dim, 4096);
  EXPECT_EQ(nt.variant, kGemmBTransposed) << "TF32 counts for fp32 only";
  EXPECT_EQ(make_problem_key(nt).text, "gemm float16 b=1 m=1024 n=4096 k=4096 op=nt");
  const ProblemSpec tn_tf32 = gemm_problem_spec(DType::f32, 64, 128, 256, 3, true, false, true);
  EXPECT_EQ(tn_tf32.variant, kGemmATransposed | kGemmAllowTf32);
  EXPECT_EQ(make_problem_key(tn_tf32).text, "gemm float32 b=3 m=64 n=128 k=256 op=tn tf32");
}

TEST(TuneGemmProblem, MAndTheBatchAreBucketedNAndKStayExact) {
  const ProblemKey key = make_problem_key(gemm_problem_spec(DType::bf16, 1000, 4100, 4099, 9, false, false, false));
  EXPECT_EQ(key.spec.tokens[0], 1024) << "M follows the tokens of the activations";
  EXPECT_EQ(key.spec.batch, 10);
  EXPECT_EQ(key.spec.tokens_kv[0], 4100) << "N decides alignment and staging";
  EXPECT_EQ(key.spec.head_dim, 4099);
  EXPECT_EQ(make_problem_key(gemm_problem_spec(DType::bf16, 999, 4100, 4099, 9, false, false, false)), key);
  EXPECT_FALSE(make_problem_key(gemm_problem_spec(DType::bf16, 1000, 4104, 4099, 9, false, false, false)) == key);
}

TEST(TuneRetentionProblem, TheKeyNamesBatchHeadsTokensAndHeadDimsWithTokensBucketed) {
  const ProblemSpec forward = retention_problem_spec(TuneOp::retention_forward, DType::bf16, 3, 8, 4000, 128, 64);
  const ProblemKey key = make_problem_key(forward);
  EXPECT_EQ(key.text, "retention_fwd bfloat16 b=3 h=8 t=4096 dk=128 dv=64");
  EXPECT_EQ(make_problem_key(retention_problem_spec(TuneOp::retention_forward, DType::bf16, 3, 8, 3900, 128, 64)), key);
  const ProblemSpec backward = retention_problem_spec(TuneOp::retention_backward, DType::bf16, 3, 8, 4000, 128, 64);
  EXPECT_EQ(make_problem_key(backward).text, "retention_bwd bfloat16 b=3 h=8 t=4096 dk=128 dv=64");
}

TEST(TuneProblemKeys, TheSameNumbersOfDifferentOpsHaveDifferentKeys) {
  std::set<std::string> texts;
  std::set<uint64_t> hashes;
  std::vector<ProblemSpec> specs{retention_problem_spec(TuneOp::retention_forward, DType::f16, 1, 1, 64, 64, 64),
                                 retention_problem_spec(TuneOp::retention_backward, DType::f16, 1, 1, 64, 64, 64),
                                 gemm_problem_spec(DType::f16, 64, 64, 64, 1, false, false, false)};
  ProblemSpec attention = specs[0];
  attention.op = TuneOp::attention_forward;
  specs.push_back(attention);
  for (const ProblemSpec& spec : specs) {
    const ProblemKey key = make_problem_key(spec);
    texts.insert(key.text);
    hashes.insert(key.hash);
  }
  EXPECT_EQ(texts.size(), 4u);
  EXPECT_EQ(hashes.size(), 4u);
}

TEST(TuneGemmProblem, AProblemFileLineGivesTheSpecOfTheCall) {
  const ProblemSpec named = problem_spec_from_json(
      R"({"op": "gemm", "dtype": "bf16", "batch": 2, "m": 100, "n": 4096, "k": 1024, "transpose_b": true})");
  const ProblemSpec call = gemm_problem_spec(DType::bf16, 100, 4096, 1024, 2, false, true, false);
  EXPECT_EQ(make_problem_key(named), make_problem_key(call));
  const ProblemSpec generic = problem_spec_from_json(
      R"({"op": "gemm", "dtype": "bf16", "batch": 2, "tokens": 100, "tokens_kv": 4096, "head_dim": 1024, "variant": 2})");
  EXPECT_EQ(make_problem_key(generic), make_problem_key(call));
  // The line written for a spec reads back as the same problem.
  const ProblemSpec tf32 = gemm_problem_spec(DType::f32, 8, 24, 40, 1, true, false, true);
  EXPECT_EQ(make_problem_key(problem_spec_from_json(problem_spec_to_json(tf32))), make_problem_key(tf32));
}

TEST(TuneGemmProblem, AProblemFileLineMixingSpellingsOrOutOfRangeIsRejected) {
  EXPECT_THROW(problem_spec_from_json(R"({"op": "gemm", "m": 8, "n": 8, "k": 8, "tokens": 8})"), Error);
  EXPECT_THROW(problem_spec_from_json(R"({"op": "gemm", "m": 8, "n": 8})"), Error);
  EXPECT_THROW(problem_spec_from_json(R"({"op": "gemm", "m": 8, "n": 8, "k": 8, "variant": 1, "transpose_a": 1})"),
               Error);
  EXPECT_THROW(problem_spec_from_json(R"({"op": "gemm", "tokens": 8, "variant": 8})"), Error);
  EXPECT_THROW(problem_spec_from_json(R"({"op": "gemm", "tokens": [8, 8]})"), Error);
  EXPECT_THROW(problem_spec_from_json(R"({"op": "retention_fwd", "tokens": [8, 8]})"), Error);
}

TEST(TuneRetentionProblem, AProblemFileLineGivesTheSpecOfTheCall) {
  const ProblemSpec line = problem_spec_from_json(
      R"({"op": "retention_bwd", "dtype": "float16", "batch": 2, "heads": 4, "tokens": 777, "head_dim": 128, "head_dim_v": 64})");
  const ProblemSpec call = retention_problem_spec(TuneOp::retention_backward, DType::f16, 2, 4, 777, 128, 64);
  EXPECT_EQ(make_problem_key(line), make_problem_key(call));
}

// --- the tuner's rules on gemm and retention problems, scripted (every build) ------------------------

ConfigSpaceRegistry gemm_and_retention_registry(const std::vector<double>& predicted_us) {
  ConfigSpaceRegistry registry;
  registry.add(testing::scripted_space(predicted_us, TuneOp::gemm));
  registry.add(testing::scripted_space(predicted_us, TuneOp::retention_forward));
  registry.add(testing::scripted_space(predicted_us, TuneOp::retention_backward));
  return registry;
}

std::vector<ProblemSpec> gemm_and_retention_problems() {
  return {gemm_problem_spec(DType::bf16, 333, 512, 256, 1, false, true, false),
          retention_problem_spec(TuneOp::retention_forward, DType::bf16, 2, 4, 1500, 64, 64),
          retention_problem_spec(TuneOp::retention_backward, DType::bf16, 2, 4, 1500, 64, 64)};
}

TEST(TuneGemmRetentionNeverLoses, AClearlyFasterConfigReplacesTheDefault) {
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  for (const ProblemSpec& spec : gemm_and_retention_problems()) {
    ScriptedRunner runner({{"c0", 100.0}, {"c1", 60.0}, {"c2", 120.0}});
    const TuneChoice choice = tuner.choose(make_problem_key(spec), &runner);
    EXPECT_EQ(choice.config->id, "c1") << op_name(spec.op);
    EXPECT_EQ(choice.source, ChoiceSource::tuned);
    EXPECT_GT(runner.calls("c0"), 0) << "the default is timed with the candidates";
  }
}

TEST(TuneGemmRetentionNeverLoses, AGainWithinTheMarginKeepsTheDefault) {
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on)));
  for (const ProblemSpec& spec : gemm_and_retention_problems()) {
    ScriptedRunner runner({{"c0", 100.0}, {"c1", 98.0}, {"c2", 99.0}});
    EXPECT_EQ(tuner.choose(make_problem_key(spec), &runner).config->id, "c0") << op_name(spec.op);
  }
}

TEST(TuneGemmRetentionNeverLoses, LoadOnlyAndDeterministicModesNeverTime) {
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  auto deterministic = testing::fast_settings(TuneMode::on);
  deterministic.deterministic = true;
  for (const TunerSettings& settings : {testing::fast_settings(TuneMode::load_only), deterministic}) {
    Tuner tuner(testing::test_options(registry, settings));
    for (const ProblemSpec& spec : gemm_and_retention_problems()) {
      ScriptedRunner runner({{"c1", 1.0}});
      const TuneChoice choice = tuner.choose(make_problem_key(spec), &runner);
      EXPECT_EQ(choice.config->id, "c0");
      EXPECT_EQ(choice.source, ChoiceSource::default_config);
      EXPECT_EQ(runner.total_calls(), 0);
    }
  }
}

TEST(TuneGemmRetentionNeverLoses, TheBackwardToggleCoversRetentionBackwardNotGemm) {
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  auto settings = testing::fast_settings(TuneMode::on);
  settings.backward_pass = false;
  Tuner tuner(testing::test_options(registry, settings));
  const auto problems = gemm_and_retention_problems();
  for (const ProblemSpec& spec : problems) {
    ScriptedRunner runner({{"c0", 100.0}, {"c1", 50.0}});
    const TuneChoice choice = tuner.choose(make_problem_key(spec), &runner);
    const bool backward = spec.op == TuneOp::retention_backward;
    EXPECT_EQ(choice.source, backward ? ChoiceSource::default_config : ChoiceSource::tuned) << op_name(spec.op);
  }
}

TEST(TuneGemmRetentionCache, WinnersPersistPerOpAndACacheWinnerThatLosesIsDropped) {
  TempDir dir;
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  const auto problems = gemm_and_retention_problems();
  {
    Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
    for (const ProblemSpec& spec : problems) {
      ScriptedRunner runner({{"c0", 100.0}, {"c1", 60.0}});
      ASSERT_EQ(tuner.choose(make_problem_key(spec), &runner).config->id, "c1");
    }
  }
  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  EXPECT_EQ(reloaded.known_winners(), problems.size());
  EXPECT_TRUE(reloaded.cache_problems().empty());
  for (const ProblemSpec& spec : problems) {
    const TuneChoice choice = reloaded.choose(make_problem_key(spec), nullptr);
    EXPECT_EQ(choice.config->id, "c1") << op_name(spec.op);
    EXPECT_EQ(choice.source, ChoiceSource::cached);
  }

  // A gemm winner whose own records show it slower than its default is never used.
  TempDir planted;
  const ProblemKey key = make_problem_key(problems[0]);
  CacheContents contents;
  contents.device = testing::test_device(registry);
  contents.winners.push_back({key.text, "c2", "c0", 1000});
  TimingRecord fast{key.text, "c0", true, "", 100.0, 99.0, 101.0, 10, 1000};
  TimingRecord slow{key.text, "c2", true, "", 110.0, 109.0, 111.0, 10, 1000};
  contents.timings = {fast, slow};
  ASSERT_EQ(merge_into_cache_file(cache_file_path(planted.path(), contents.device), contents), "");
  Tuner loading(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, planted.str())));
  ASSERT_EQ(loading.cache_problems().size(), 1u);
  EXPECT_NE(loading.cache_problems()[0].find("does not beat its default 'c0'"), std::string::npos)
      << loading.cache_problems()[0];
  const TuneChoice choice = loading.choose(key, nullptr);
  EXPECT_EQ(choice.config->id, "c0");
  EXPECT_EQ(choice.source, ChoiceSource::default_config);
}

TEST(TuneGemmRetentionOffline, AProblemListOfGemmAndRetentionLinesIsTunedIntoTheCache) {
  TempDir dir;
  const auto file = dir.path() / "problems.jsonl";
  std::ofstream(file) << "# gemm and retention\n"
                         R"({"op": "gemm", "dtype": "bf16", "m": 333, "n": 512, "k": 256, "transpose_b": true})"
                         "\n"
                         R"({"op": "retention_fwd", "dtype": "bf16", "batch": 2, "heads": 4, "tokens": 1500})"
                         "\n"
                         R"({"op": "retention_bwd", "dtype": "bf16", "batch": 2, "heads": 4, "tokens": 1500})"
                         "\n";
  const std::vector<ProblemSpec> problems = read_problem_list(file);
  ASSERT_EQ(problems.size(), 3u);
  const auto registry = gemm_and_retention_registry({10, 20, 30});
  Tuner tuner(testing::test_options(registry, testing::fast_settings(TuneMode::on, dir.str())));
  std::vector<TuneOp> timed;
  const OfflineTuneSummary summary = tune_problem_list(
      tuner, problems,
      [&](const ProblemSpec& bucketed) {
        timed.push_back(bucketed.op);
        return std::make_unique<ScriptedRunner>(std::map<std::string, double>{{"c0", 100.0}, {"c2", 50.0}});
      },
      nullptr);
  EXPECT_EQ(summary.tuned, 3u);
  EXPECT_EQ(summary.failed, 0u);
  EXPECT_EQ(timed, (std::vector<TuneOp>{TuneOp::gemm, TuneOp::retention_forward, TuneOp::retention_backward}));
  // The calls of those shapes find the winners (the same keys as the lines).
  Tuner reloaded(testing::test_options(registry, testing::fast_settings(TuneMode::load_only, dir.str())));
  for (const ProblemSpec& call : gemm_and_retention_problems()) {
    EXPECT_EQ(reloaded.choose(make_problem_key(call), nullptr).config->id, "c2") << op_name(call.op);
  }
}

}  // namespace
}  // namespace attnkit::tune

#if defined(ATTNKIT_WITH_CUDA)

namespace attnkit {
namespace {

// --- the CUDA spaces (a CUDA build; no GPU needed) ---------------------------------------------------

using cuda::gemm::gemm_kernels;
using cuda::gemm::GemmKernel;

tune::DeviceLimits hopper() { return tune::cuda_device_limits(90, 132); }
tune::DeviceLimits ampere() { return tune::cuda_device_limits(80, 108); }

std::string default_id(const tune::ConfigSpace& space, const tune::ProblemSpec& spec,
                       const tune::DeviceLimits& limits) {
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
  const tune::Config* chosen = tune::default_config(space, ranking, spec, limits);
  return chosen == nullptr ? std::string() : chosen->id;
}

bool gemm_forced() {
  const char* forced = std::getenv(cuda::gemm::kForcedGemmConfigVariable);
  return forced != nullptr && forced[0] != '\0';
}

TEST(TunerCudaGemmSpace, HasOneConfigPerRegistryEntryNamedByIt) {
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  std::set<std::string> names;
  for (const GemmKernel* kernel : gemm_kernels()) names.insert(kernel->name);
  ASSERT_EQ(space.configs.size(), names.size());
  for (const tune::Config& config : space.configs) {
    const GemmKernel* kernel = cuda::gemm::gemm_kernel_of(config);
    ASSERT_NE(kernel, nullptr) << config.id;
    EXPECT_EQ(config.id, kernel->name);
    EXPECT_EQ(config.param("tile_m"), kernel->tile_m);
  }
  EXPECT_NE(tune::builtin_config_spaces().find(tune::TuneOp::gemm, Backend::cuda), nullptr);
}

std::vector<tune::ProblemSpec> gemm_problems() {
  std::vector<tune::ProblemSpec> specs;
  for (const DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 4096, 4096},
                                                                     {16, 4096, 4096},
                                                                     {1024, 1024, 1024},
                                                                     {4096, 4096, 4096},
                                                                     {333, 517, 129},
                                                                     {64, 256, 65536}}) {
      for (const int layout : {0, 1, 2, 3}) {
        const bool tf32 = dtype == DType::f32 && layout == 1;
        specs.push_back(tune::gemm_problem_spec(dtype, m, n, k, 1, (layout & 1) != 0, (layout & 2) != 0, tf32));
      }
    }
  }
  specs.push_back(tune::gemm_problem_spec(DType::bf16, 256, 512, 128, 12, false, true, false));
  return specs;
}

TEST(TunerCudaGemmSpace, TheDefaultIsTheRegistrysChoice) {
  if (gemm_forced()) GTEST_SKIP() << "ATTNKIT_GEMM_CONFIG is set: the registry's choice is the forced entry";
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  for (const tune::DeviceLimits& limits : {hopper(), ampere()}) {
    for (const tune::ProblemSpec& spec : gemm_problems()) {
      const cuda::gemm::GemmChoice expected =
          cuda::gemm::select_gemm_kernel(cuda::gemm::gemm_tuning_shape(spec), cuda::gemm::gemm_device_of(limits),
                                         cuda::gemm::gemm_spec_allows_tf32(spec));
      ASSERT_NE(expected.kernel, nullptr);
      const std::string text = tune::make_problem_key(spec).text;
      EXPECT_EQ(default_id(space, spec, limits), expected.kernel->name) << text << " cc " << limits.compute_capability;
      // A pure function of the problem.
      EXPECT_EQ(default_id(space, spec, limits), default_id(space, spec, limits)) << text;
    }
  }
}

TEST(TunerCudaGemmSpace, ValidConfigsComputeTheProblemAndHaveFiniteEstimates) {
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  for (const tune::DeviceLimits& limits : {hopper(), ampere()}) {
    for (const tune::ProblemSpec& spec : gemm_problems()) {
      const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
      ASSERT_FALSE(ranking.valid.empty()) << tune::make_problem_key(spec).text;
      EXPECT_EQ(ranking.valid.size() + ranking.rejected.size(), space.configs.size());
      const cuda::gemm::GemmShape shape = cuda::gemm::gemm_tuning_shape(spec);
      for (const auto& ranked : ranking.valid) {
        const GemmKernel& kernel = *cuda::gemm::gemm_kernel_of(*ranked.config);
        EXPECT_EQ(kernel.dtype, spec.dtype);
        EXPECT_TRUE(cuda::gemm::gemm_architecture_runs_on(kernel.architecture, limits.compute_capability));
        const bool tf32 = cuda::gemm::gemm_spec_allows_tf32(spec);
        EXPECT_TRUE(cuda::gemm::gemm_kernel_matches(kernel, shape, tf32) ||
                    cuda::gemm::gemm_kernel_transposes_b(kernel, shape, tf32));
        EXPECT_GT(ranked.cost.seconds, 0.0) << ranked.config->id;
        EXPECT_TRUE(std::isfinite(ranked.cost.seconds)) << ranked.config->id;
      }
      for (const auto& rejected : ranking.rejected) EXPECT_FALSE(rejected.reason.empty()) << rejected.config->id;
    }
  }
}

TEST(TunerCudaGemmSpace, Tf32RowsRunOnlyProblemsThatAllowTf32) {
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  for (const bool allow : {false, true}) {
    const tune::ProblemSpec spec = tune::gemm_problem_spec(DType::f32, 512, 512, 512, 1, false, false, allow);
    int tf32_rows = 0;
    for (const auto& ranked : tune::rank_candidates(space, spec, hopper()).valid) {
      if (cuda::gemm::gemm_kernel_of(*ranked.config)->math == cuda::gemm::GemmMath::tf32) ++tf32_rows;
    }
    if (!allow) {
      EXPECT_EQ(tf32_rows, 0) << "TF32 is opt-in";
    }
  }
}

// fp32 decode against a wide weight (x @ W and x @ W^T): the swapped split-K rows of 128 of N x 64 of M are valid
// configs of the tuner's space, with a finite estimate; the default (the registry's choice) is the TF32 row at M 16
// with TF32 allowed and the narrow 3xTF32 entry of 64 rows at M 48 without; without TF32 no TF32 row is valid.
// Skipped where the build has no such rows.
TEST(TunerCudaGemmSpace, Fp32DecodeProblemsReachTheSwappedSplitKRows) {
  if (gemm_forced()) GTEST_SKIP() << "ATTNKIT_GEMM_CONFIG is set: the registry's choice is the forced entry";
  std::set<std::string> names;
  for (const GemmKernel* kernel : gemm_kernels()) names.insert(kernel->name);
  if (names.count("sm90_tf32_ak_bmn_128x64x32_c1x1_swapped_splitk") == 0) {
    GTEST_SKIP() << "this build has no fp32 swapped split-K rows (ATTNKIT_CUDA_ARCHS without 90a)";
  }
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  for (const bool b_transposed : {false, true}) {
    const std::string b = b_transposed ? "bk" : "bmn";
    for (const bool tf32 : {true, false}) {
      const int64_t m = tf32 ? 16 : 48;
      const std::string row = tf32 ? "sm90_tf32_ak_" + b + "_128x64x32_c1x1_swapped_splitk"
                                   : "sm90_3xtf32_ak_" + b + "_128x64x16_c1x1_swapped_splitk";
      const tune::ProblemSpec spec = tune::gemm_problem_spec(DType::f32, m, 16384, 4096, 1, false, b_transposed, tf32);
      const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, hopper());
      bool valid = false;
      for (const auto& ranked : ranking.valid) {
        if (ranked.config->id != row) continue;
        valid = true;
        EXPECT_TRUE(std::isfinite(ranked.cost.seconds) && ranked.cost.seconds > 0.0) << row;
      }
      EXPECT_TRUE(valid) << row;
      EXPECT_EQ(default_id(space, spec, hopper()),
                tf32 ? row : std::string(cuda::gemm::narrow_3xtf32_gemm_kernel(b_transposed, 64).name));
      if (!tf32) {
        for (const auto& ranked : ranking.valid) {
          EXPECT_NE(cuda::gemm::gemm_kernel_of(*ranked.config)->math, cuda::gemm::GemmMath::tf32) << ranked.config->id;
        }
      }
    }
  }
}

TEST(TunerCudaGemmSpace, TheSpecOfACallIsItsCanonicalForm) {
  // x [M, K] @ W^T with W [N, K]: op(B) K-major; a column-major C is computed transposed.
  std::vector<unsigned char> memory(1 << 16);
  const int64_t m = 5, n = 24, k = 16;
  const int64_t a_extents[] = {m, k}, w_extents[] = {n, k}, c_extents[] = {m, n};
  GemmProblem p;
  p.a = make_view(memory.data(), DType::bf16, 2, a_extents, Device{});
  p.b = make_view(memory.data(), DType::bf16, 2, w_extents, Device{});
  p.c = make_view(memory.data(), DType::bf16, 2, c_extents, Device{});
  p.transpose_b = true;
  const tune::ProblemSpec spec = cuda::gemm::gemm_spec_of(cuda::gemm::describe_gemm(p), false);
  EXPECT_EQ(tune::make_problem_key(spec).text, "gemm bfloat16 b=1 m=5 n=24 k=16 op=nt");
  const cuda::gemm::GemmShape packed = cuda::gemm::gemm_tuning_shape(spec);
  EXPECT_TRUE(packed.a_k_major());
  EXPECT_TRUE(packed.b_k_major());
  EXPECT_EQ(packed.c_row, n);
}

// Retention: the rule's launches, from retention_jobs.hpp's own functions.
struct Launch {
  const cuda::retention::ChunkKernel* kernel;
  int32_t segments;
  int64_t segment_tokens;
  bool operator==(const Launch&) const = default;
};

// On a device of compute capability `capability` (the forward's wgmma swap, retention_plan.cpp).
std::vector<Launch> launches_of(const cuda::retention::ChunkShapeChoice& asked, const tune::ProblemSpec& s,
                                int multiprocessors, int capability = 90) {
  using cuda::retention::chunk_job_shape;
  const cuda::retention::ChunkShapeChoice choice = cuda::retention::on_device(asked, capability);
  const int64_t bh = s.batch * s.heads_q, t = s.tokens[0];
  if (s.op == tune::TuneOp::retention_forward) {
    if (const auto* decode = cuda::retention::decode_kernel_for(s.dtype, bh, t, s.head_dim, s.head_dim_v, choice)) {
      return {{decode, 1, t}};
    }
    const auto job = chunk_job_shape(s.dtype, s.head_dim, s.head_dim_v, bh, t, multiprocessors, choice);
    const cuda::retention::ChunkKernel* kernel = job.kernel;
    if (choice.wgmma && kernel != nullptr) {
      const int64_t wide_dv = cuda::retention::wgmma_wide_dv(choice, s.head_dim_v);
      if (const auto* wgmma = cuda::retention::wgmma_chunk_kernel_for(kernel, wide_dv, capability)) kernel = wgmma;
    }
    return {{kernel, job.segments, job.segment_tokens}};
  }
  // The backward's jobs that share an instance run in one launch (joint, the rule): their segment count follows it.
  const auto sharing = cuda::retention::backward_sharing(choice, s.head_dim, s.head_dim_v);
  const auto dq = chunk_job_shape(s.dtype, s.head_dim_v, s.head_dim, bh, t, multiprocessors, choice, sharing.dq);
  const auto dv = chunk_job_shape(s.dtype, s.head_dim, s.head_dim_v, bh, t, multiprocessors, choice, sharing.dv);
  auto kernel_of = [&](const cuda::retention::JobShape& job, int64_t value_dim) {
    if (!choice.wgmma || job.kernel == nullptr) return job.kernel;
    const int64_t wide_dv = cuda::retention::wgmma_wide_dv(choice, value_dim);
    const auto* wgmma = cuda::retention::wgmma_chunk_kernel_for(job.kernel, wide_dv, capability);
    return wgmma != nullptr ? wgmma : job.kernel;
  };
  return {{kernel_of(dq, s.head_dim), dq.segments, dq.segment_tokens},
          {kernel_of(dv, s.head_dim_v), dv.segments, dv.segment_tokens}};
}

// Whether the rule finds an instance for every job (a backward with Dv = 96 needs a Dk' = 96 instance).
bool rule_runs(const tune::ProblemSpec& spec, int multiprocessors) {
  for (const Launch& l : launches_of(cuda::retention::ChunkShapeChoice{}, spec, multiprocessors)) {
    if (l.kernel == nullptr) return false;
  }
  return true;
}

std::vector<tune::ProblemSpec> retention_problems() {
  std::vector<tune::ProblemSpec> specs;
  for (const tune::TuneOp op : {tune::TuneOp::retention_forward, tune::TuneOp::retention_backward}) {
    for (const auto& [b, h, t] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 16384}, {1, 2, 8}, {2, 8, 4096}, {8, 32, 2048}, {1, 4, 700}, {4, 16, 16}}) {
      for (const auto& [dk, dv] : std::vector<std::array<int64_t, 2>>{{64, 64}, {128, 128}, {64, 128}, {128, 96}}) {
        specs.push_back(tune::retention_problem_spec(op, DType::bf16, b, h, t, dk, dv));
      }
    }
  }
  return specs;
}

TEST(TunerCudaRetentionSpace, ConfigIdsAreStableNames) {
  const tune::ConfigSpace forward = cuda::retention::retention_forward_space();
  const tune::ConfigSpace backward = cuda::retention::retention_backward_space();
  ASSERT_NE(forward.find("decode"), nullptr);
  EXPECT_EQ(backward.find("decode"), nullptr) << "the backward has no decode kernel";
  std::set<int> blocks;
  for (const auto* kernel : cuda::retention::chunk_kernels()) blocks.insert(kernel->value_block);
  for (const int block : blocks) {
    const std::string prefix = "chunk64_block" + std::to_string(block) + "_seg";
    for (const tune::ConfigSpace* space : {&forward, &backward}) {
      EXPECT_NE(space->find(prefix + "fill"), nullptr) << prefix;
      for (const int64_t segments : cuda::retention::kRetentionSegmentCounts) {
        const tune::Config* config = space->find(prefix + std::to_string(segments));
        ASSERT_NE(config, nullptr) << prefix << segments;
        EXPECT_EQ(cuda::retention::chunk_shape_of(*config).segments, segments);
        EXPECT_EQ(cuda::retention::chunk_shape_of(*config).value_block, block);
      }
    }
  }
  // The wgmma configs: the rule's value block (CTAs of 128 value columns where they can be) and each block.
  for (const std::string& prefix : std::vector<std::string>{"wgmma_wide_seg", "wgmma_block64_seg"}) {
    for (const std::string& tail : {std::string("fill"), std::string("8")}) {
      const tune::Config* config = forward.find(prefix + tail);
      ASSERT_NE(config, nullptr) << prefix << tail;
      EXPECT_TRUE(cuda::retention::chunk_shape_of(*config).wgmma) << prefix << tail;
      EXPECT_EQ(cuda::retention::chunk_shape_of(*config).value_block, prefix == "wgmma_wide_seg" ? 0 : 64);
      EXPECT_NE(backward.find(prefix + tail), nullptr) << prefix << tail;
    }
  }
  EXPECT_FALSE(cuda::retention::chunk_shape_of(*forward.find("chunk64_block64_segfill")).wgmma);
  EXPECT_NE(tune::builtin_config_spaces().find(tune::TuneOp::retention_forward, Backend::cuda), nullptr);
  EXPECT_NE(tune::builtin_config_spaces().find(tune::TuneOp::retention_backward, Backend::cuda), nullptr);
}

TEST(TunerCudaRetentionSpace, TheDefaultMakesTheRulesLaunches) {
  for (const tune::DeviceLimits& limits : {hopper(), ampere()}) {
    for (const tune::ProblemSpec& spec : retention_problems()) {
      const tune::ConfigSpace space = spec.op == tune::TuneOp::retention_forward
                                          ? cuda::retention::retention_forward_space()
                                          : cuda::retention::retention_backward_space();
      const std::string id = default_id(space, spec, limits);
      const std::string text = tune::make_problem_key(spec).text;
      if (!rule_runs(spec, limits.processors)) {
        EXPECT_TRUE(id.empty()) << text << ": no kernel runs it, no config either";
        continue;
      }
      ASSERT_FALSE(id.empty()) << text;
      const int capability = limits.compute_capability;
      const auto rule = launches_of(cuda::retention::ChunkShapeChoice{}, spec, limits.processors, capability);
      EXPECT_EQ(launches_of(cuda::retention::chunk_shape_of(*space.find(id)), spec, limits.processors, capability),
                rule)
          << text << " default " << id;
      // On a 9.0 device with the wgmma instances compiled, the rule's forward chunk job runs the wgmma kernel where
      // an instance has its value block (Dv a multiple of 64), and the default is a wgmma config exactly then.
      const bool wgmma_built = cuda::retention::find_wgmma_chunk_kernel(DType::bf16, 64, 64) != nullptr;
      if (id != "decode" && wgmma_built) {
        // Every job's Dv' a multiple of 64 (the backward's dQ and dK carry Dk value columns).
        const bool blocks_of_64 =
            spec.head_dim_v % 64 == 0 && (spec.op == tune::TuneOp::retention_forward || spec.head_dim % 64 == 0);
        bool wgmma_rule = true;
        for (const Launch& l : rule) wgmma_rule = wgmma_rule && std::string(l.kernel->family) == "wgmma_chunk64";
        EXPECT_EQ(wgmma_rule, capability == 90 && blocks_of_64) << text;
        EXPECT_EQ(id.rfind("wgmma_", 0) == 0, wgmma_rule) << text << " default " << id;
      }
      const bool decode =
          spec.op == tune::TuneOp::retention_forward && spec.tokens[0] <= 16 && spec.head_dim_v % 64 == 0;
      EXPECT_EQ(id == "decode", decode) << text;
      EXPECT_EQ(default_id(space, spec, limits), id) << "a pure function of the problem";
    }
  }
}

TEST(TunerCudaRetentionSpace, NoTwoValidConfigsMakeTheSameLaunches) {
  const tune::DeviceLimits limits = hopper();
  for (const tune::ProblemSpec& spec : retention_problems()) {
    const tune::ConfigSpace space = spec.op == tune::TuneOp::retention_forward
                                        ? cuda::retention::retention_forward_space()
                                        : cuda::retention::retention_backward_space();
    const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
    if (!rule_runs(spec, limits.processors)) continue;
    ASSERT_FALSE(ranking.valid.empty());
    std::set<std::string> seen;
    for (const auto& ranked : ranking.valid) {
      std::string launches;
      for (const Launch& l : launches_of(cuda::retention::chunk_shape_of(*ranked.config), spec, limits.processors)) {
        ASSERT_NE(l.kernel, nullptr) << ranked.config->id;
        launches += std::to_string(l.kernel->value_block) + l.kernel->family + "/" + std::to_string(l.segments) + ";";
      }
      EXPECT_TRUE(seen.insert(launches).second) << tune::make_problem_key(spec).text << ": " << ranked.config->id;
    }
    for (const auto& rejected : ranking.rejected) EXPECT_FALSE(rejected.reason.empty()) << rejected.config->id;
  }
}

TEST(TunerCudaRetentionSpace, ProblemsNoKernelRunsHaveNoValidConfig) {
  const tune::ConfigSpace forward = cuda::retention::retention_forward_space();
  const tune::ProblemSpec f32 =
      tune::retention_problem_spec(tune::TuneOp::retention_forward, DType::f32, 1, 1, 64, 64, 64);
  EXPECT_TRUE(tune::rank_candidates(forward, f32, hopper()).valid.empty());
  const tune::ProblemSpec odd =
      tune::retention_problem_spec(tune::TuneOp::retention_forward, DType::bf16, 1, 1, 64, 48, 64);
  EXPECT_TRUE(tune::rank_candidates(forward, odd, hopper()).valid.empty());
}

TEST(TunerCudaRetentionSpace, TheEstimatePrefersSegmentsForFewLongSequences) {
  const tune::ConfigSpace space = cuda::retention::retention_forward_space();
  const tune::ProblemSpec few =
      tune::retention_problem_spec(tune::TuneOp::retention_forward, DType::bf16, 1, 1, 16384, 128, 128);
  const tune::CandidateRanking ranking = tune::rank_candidates(space, few, hopper());
  ASSERT_FALSE(ranking.valid.empty());
  EXPECT_GT(launches_of(cuda::retention::chunk_shape_of(*ranking.valid.front().config), few, 132).front().segments, 1)
      << ranking.valid.front().config->id;
  const tune::Config* one = space.find("chunk64_block64_seg1");
  ASSERT_NE(one, nullptr);
  double seg1 = 0, best = ranking.valid.front().cost.seconds;
  for (const auto& ranked : ranking.valid) {
    if (ranked.config == one) seg1 = ranked.cost.seconds;
  }
  EXPECT_LT(best * 4, seg1) << "one CTA per value block leaves most SMs idle";
}

// The joint backward (retention_jobs.hpp) counts the CTAs of the jobs that share a launch together. On the mma.sync
// kernel (two CTAs a multiprocessor at full speed): at B2 H16 T16384 D128 three jobs of 64 CTAs need no segments on
// 132 multiprocessors, where one job alone takes 4; at D64 (three jobs of 32 CTAs) the wave model takes 8. A forced
// count still wins.
TEST(RetentionChunkShape, AJointBackwardCountsTheCtasOfTheJobsInItsLaunchTogether) {
  using cuda::retention::backward_sharing;
  using cuda::retention::chunk_job_shape;
  cuda::retention::ChunkShapeChoice joint, separate;
  joint.wgmma = separate.wgmma = false;
  separate.joint_backward = false;
  EXPECT_TRUE(cuda::retention::ChunkShapeChoice{}.joint_backward) << "the rule runs the joint backward";
  EXPECT_EQ(backward_sharing(joint, 128, 128).dq, 3);
  EXPECT_EQ(backward_sharing(joint, 128, 128).dv, 3);
  EXPECT_EQ(backward_sharing(joint, 64, 128).dq, 2);
  EXPECT_EQ(backward_sharing(joint, 64, 128).dv, 1);
  EXPECT_EQ(backward_sharing(separate, 128, 128).dq, 1);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 16384, 132, separate).segments, 4);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 16384, 132, joint, 3).segments, 1);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 64, 64, 32, 16384, 132, joint, 3).segments, 8);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 128, 4096, 132, joint, 3).segments, 1);
  // An empty sequence (no chunk) or a device that reports no multiprocessors: one segment, no division by zero.
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 0, 132, joint, 3).segments, 1);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 16384, 0, joint, 3).segments, 1);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 16384, 0, separate).segments, 1);
  joint.segments = 4;
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 32, 16384, 132, joint, 3).segments, 4);
}

// The rule's segments for the wgmma kernel (the default choice on a 9.0 device): one CTA fills a multiprocessor's
// throughput, so segments only fill idle multiprocessors, and no more CTAs than fit at once (one at D 64 and of 128
// value columns, two of 64 at D 128). Each count below was the fastest or within 6 % of it on an H200 (docs/perf.md,
// retention "Fourteenth step" and "Sixteenth step"); the old rule (two CTAs per multiprocessor) took 2 at B8 H16 D64
// and B6 H16 D64, 25 % and 17 % slower.
TEST(RetentionChunkShape, TheWgmmaRuleFillsEachMultiprocessorOnce) {
  if (cuda::retention::find_wgmma_chunk_kernel(DType::bf16, 64, 64) == nullptr) {
    GTEST_SKIP() << "this build has no wgmma retention kernel (ATTNKIT_CUDA_ARCHS without 90a)";
  }
  const cuda::retention::ChunkShapeChoice rule;
  // The state-only launch's parts a segment (state_splits_for): as many as run in one round, 2 where the segments
  // before the last are 64 CTAs, one where they are more than half the multiprocessors.
  struct Row {
    int64_t batch_heads, tokens, head_dim, segments, state_splits;
  };
  const Row rows[] = {
      {128, 4096, 64, 1, 1}, {96, 4096, 64, 1, 1},   {64, 4096, 64, 2, 2},   {36, 8192, 64, 3, 1},
      {32, 16384, 64, 4, 1}, {16, 16384, 64, 8, 1},  {128, 4096, 128, 1, 1}, {64, 4096, 128, 2, 2},
      {36, 4096, 128, 3, 1}, {32, 16384, 128, 4, 1}, {16, 16384, 128, 8, 1}, {40, 4096, 64, 3, 1},
      {24, 8192, 64, 5, 1},  {20, 4096, 64, 6, 1},
  };
  for (const Row& row : rows) {
    const auto shape = cuda::retention::chunk_job_shape(DType::bf16, row.head_dim, row.head_dim, row.batch_heads,
                                                        row.tokens, 132, rule);
    EXPECT_EQ(shape.segments, row.segments)
        << "B*H " << row.batch_heads << " T " << row.tokens << " D " << row.head_dim;
    EXPECT_EQ(shape.state_splits, row.state_splits)
        << "B*H " << row.batch_heads << " T " << row.tokens << " D " << row.head_dim;
    // Whole chunks a part, and no part wholly past its segment's end.
    EXPECT_EQ(shape.state_segment_tokens % 64, 0);
    EXPECT_LT((shape.state_splits - 1) * shape.state_segment_tokens, shape.segment_tokens);
    EXPECT_GE(shape.state_splits * shape.state_segment_tokens, shape.segment_tokens);
  }
  // Forced parts are kept to whole chunks: 5 parts of a 32-chunk segment are 5 parts of 7 chunks; 40 parts are 32.
  cuda::retention::ChunkShapeChoice forced;
  forced.state_splits = 5;
  auto shape = cuda::retention::chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, forced);
  EXPECT_EQ(shape.state_splits, 5);
  EXPECT_EQ(shape.state_segment_tokens, 7 * 64);
  forced.state_splits = 40;
  shape = cuda::retention::chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, forced);
  EXPECT_EQ(shape.state_splits, 32);
  EXPECT_EQ(shape.state_segment_tokens, 64);
  // The joint backward at B4 H16 D64 (three jobs of 64 CTAs): one segment (0.181 ms measured against 0.192 with two).
  EXPECT_EQ(cuda::retention::chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, rule, 3).segments, 1);
}

// The rule told the device's DRAM rate (on_device with dram_bytes_per_step) takes fewer segments than the wave model
// for a D64 wgmma job where a roofline of its bytes and chain steps finds them 5 % cheaper (segments_by_roofline). An
// H100 SXM (memory 2619 MHz x 5120 bits, SM 1980 MHz) moves ~2.3 MB in a chunk step, an H200 (3201 MHz x 6144 bits)
// ~3.4 MB. Measured on an H100 (docs/perf.md, retention "Twentieth step"): B4 T4096 H16 D64 one segment 0.053 ms
// against two 0.064, B3 T8192 H12 two 0.076 against three 0.077, B2 T16384 H16 four 0.133 as two; on an H200 two
// segments at B4 (0.048 against ~0.058 with one), the wave model's counts elsewhere. The joint backward and D128 keep
// the wave model; a forced count still wins.
TEST(RetentionChunkShape, TheRuleTakesFewerD64SegmentsWhereTheDeviceBandwidthBoundsThem) {
  if (cuda::retention::find_wgmma_chunk_kernel(DType::bf16, 64, 64) == nullptr) {
    GTEST_SKIP() << "this build has no wgmma retention kernel (ATTNKIT_CUDA_ARCHS without 90a)";
  }
  using cuda::retention::chunk_job_shape;
  using cuda::retention::dram_bytes_per_step;
  using cuda::retention::on_device;
  const double h100 = dram_bytes_per_step(2619000, 5120, 1980000);
  const double h200 = dram_bytes_per_step(3201000, 6144, 1980000);
  EXPECT_NEAR(h100, 2.31e6, 0.01e6);
  EXPECT_NEAR(h200, 3.39e6, 0.01e6);
  EXPECT_EQ(dram_bytes_per_step(0, 5120, 1980000), 0.0) << "a device that does not say: the wave model";
  const auto h100_rule = on_device({}, 90, h100);
  const auto h200_rule = on_device({}, 90, h200);
  struct Row {
    int64_t batch_heads, tokens, h100_segments, h200_segments;
  };
  const Row rows[] = {{128, 4096, 1, 1}, {96, 4096, 1, 1},  {64, 4096, 1, 2},
                      {36, 8192, 2, 3},  {32, 16384, 4, 4}, {16, 16384, 8, 8}};
  for (const Row& row : rows) {
    EXPECT_EQ(chunk_job_shape(DType::bf16, 64, 64, row.batch_heads, row.tokens, 132, h100_rule).segments,
              row.h100_segments)
        << "H100, B*H " << row.batch_heads << " T " << row.tokens;
    EXPECT_EQ(chunk_job_shape(DType::bf16, 64, 64, row.batch_heads, row.tokens, 132, h200_rule).segments,
              row.h200_segments)
        << "H200, B*H " << row.batch_heads << " T " << row.tokens;
  }
  // D128 and the joint backward: the wave model's counts whatever the rate.
  const cuda::retention::ChunkShapeChoice rule;
  EXPECT_EQ(chunk_job_shape(DType::bf16, 128, 128, 64, 4096, 132, h100_rule).segments,
            chunk_job_shape(DType::bf16, 128, 128, 64, 4096, 132, rule).segments);
  EXPECT_EQ(chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, h100_rule, 3).segments,
            chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, rule, 3).segments);
  auto forced = h100_rule;
  forced.segments = 2;
  EXPECT_EQ(chunk_job_shape(DType::bf16, 64, 64, 64, 4096, 132, forced).segments, 2);
}

// The parallel form's backward over a decay matrix runs kDecayMatrixMembers (batch, value slice) pairs per CTA where
// their shared memory fits SM90's (two members' tiles and one stage of the matrix's tile), one pair per CTA otherwise
// and with gamma; the CTAs count the pairs in groups (an odd batch count leaves the last group short). No GPU needed.
TEST(RetentionParallelBackward, AMatrixGroupsPairsPerCtaWhereTheirSharedMemoryFits) {
  using cuda::retention::kDecayMatrixMembers;
  const int64_t batch = 3, heads = 2, tokens = 131;  // 3 blocks of 64 tokens per side
  struct Case {
    int64_t dk, dv;
    DType decay_dtype;  // none (DType::f32 with no matrix given) for the gamma form
    bool matrix;
    int members;
    int64_t dq_ctas, dv_ctas;
  };
  const std::vector<Case> cases = {
      // 2 groups of the 3 batches x 2 heads x 3 blocks; dV one slice of 128.
      {128, 128, DType::f32, true, kDecayMatrixMembers, 12, 12},
      {128, 128, DType::bf16, true, kDecayMatrixMembers, 12, 12},
      // dV: 3 slices of 64, 9 pairs in 5 groups (pairs spanning batches, a short last one).
      {64, 192, DType::f32, true, kDecayMatrixMembers, 12, 30},
      // Two members' tiles at Dv = 256 do not fit: one pair per CTA.
      {64, 256, DType::f32, true, 1, 18, 72},
      {128, 128, DType::f32, false, 1, 18, 18},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("Dk " + std::to_string(c.dk) + " Dv " + std::to_string(c.dv) + (c.matrix ? " matrix" : " gamma"));
    test::HostTensor q = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dk});
    test::HostTensor k = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dk});
    test::HostTensor v = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dv});
    test::HostTensor grad_out = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dv});
    test::HostTensor grad_q = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dk});
    test::HostTensor grad_k = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dk});
    test::HostTensor grad_v = test::HostTensor::contiguous(DType::bf16, {batch, tokens, heads, c.dv});
    test::HostTensor decay = test::HostTensor::contiguous(c.decay_dtype, {heads, tokens, tokens});
    RetentionBackward problem;
    problem.q = q.view;
    problem.k = k.view;
    problem.v = v.view;
    problem.grad_out = grad_out.view;
    problem.grad_q = grad_q.view;
    problem.grad_k = grad_k.view;
    problem.grad_v = grad_v.view;
    problem.mode = RetentionMode::parallel;
    if (c.matrix) {
      problem.decay = decay.view;
    } else {
      problem.normalize = true;
    }
    const cuda::retention::BackwardSelection selection =
        cuda::retention::select_backward(problem, 132, cuda::retention::ChunkShapeChoice{});
    ASSERT_TRUE(selection.parallel_form);
    for (const auto* shape : {&selection.dq, &selection.dk, &selection.dv}) {
      ASSERT_NE(shape->kernel, nullptr);
      EXPECT_EQ(shape->kernel->members, c.members);
      EXPECT_EQ(shape->kernel->threads, 128 * c.members);
      EXPECT_LE(shape->shared_bytes, 227 * 1024);
    }
    const auto jobs = cuda::retention::fill_parallel_backward(problem, selection, {}, nullptr);
    EXPECT_EQ(jobs[1].ctas, c.dq_ctas);
    EXPECT_EQ(jobs[2].ctas, c.dq_ctas);
    EXPECT_EQ(jobs[3].ctas, c.dv_ctas);
    // On a device with less shared memory per block (SM80), the plan's one-member selection.
    cuda::retention::BackwardSelection single = selection;
    cuda::retention::one_member_parallel_backward(problem, single);
    EXPECT_EQ(single.dq.kernel->members, 1);
    EXPECT_EQ(single.dv.kernel->members, 1);
    const int64_t slices = c.dv % c.dk == 0 ? c.dv / c.dk : c.dv / 64;
    EXPECT_EQ(cuda::retention::fill_parallel_backward(problem, single, {}, nullptr)[3].ctas,
              batch * heads * 3 * slices);
  }
}

// --- on a GPU ---------------------------------------------------------------------------------------

class TunerGemmRetentionGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    tune::reset_process_tuners();
    TunerSettings s;
    s.mode = TuneMode::on;
    s.warmup_steps_forward = s.warmup_steps_backward = 1;
    s.steps_forward = s.steps_backward = 3;
    s.cache_dir = "";
    configure_tuner(s);
  }
  void TearDown() override {
    tune::reset_process_tuners();
    detail::clear_gemm_plans();
    detail::clear_retention_plans();
  }
};

// A device copy of a host tensor (contiguous, same extents).
struct DeviceCopy {
  test::DeviceBuffer memory;
  TensorView view;
  size_t bytes = 0;
  explicit DeviceCopy(const TensorView& host) {
    bytes = static_cast<size_t>(host.numel()) * dtype_size(host.dtype);
    memory = test::DeviceBuffer(bytes);
    view = host;
    view.data = memory.data();
    view.device = Device{DeviceType::cuda, 0};
    test::expect_cuda(cudaMemcpy(memory.data(), host.data, bytes, cudaMemcpyHostToDevice), "H2D");
  }
  void download(const TensorView& host) const {
    test::expect_cuda(cudaMemcpy(host.data, memory.data(), bytes, cudaMemcpyDeviceToHost), "D2H");
  }
};

// An fp32 copy of a host tensor (the CPU oracle's input).
test::HostTensor widened(const TensorView& view) {
  std::vector<int64_t> extents(view.extents.begin(), view.extents.begin() + view.rank);
  test::HostTensor wide = test::HostTensor::contiguous(DType::f32, extents);
  const std::vector<double> values = test::to_doubles(view);
  for (size_t i = 0; i < values.size(); ++i) static_cast<float*>(wide.view.data)[i] = static_cast<float>(values[i]);
  return wide;
}

TEST_F(TunerGemmRetentionGpu, ATunedGemmRunsItsChoiceAndMatchesTheCpuOracle) {
  std::mt19937_64 rng(3);
  const int64_t m = 200, n = 264, k = 136;
  test::HostTensor a = test::HostTensor::contiguous(DType::bf16, {m, k});
  test::HostTensor w = test::HostTensor::contiguous(DType::bf16, {n, k});
  test::HostTensor c = test::poisoned_tensor(DType::bf16, {m, n});
  test::fill_random(a.view, rng);
  test::fill_random(w.view, rng);
  DeviceCopy da(a.view), dw(w.view), dc(c.view);
  GemmProblem p;
  p.a = da.view;
  p.b = dw.view;
  p.c = dc.view;
  p.transpose_b = true;
  RunOptions options;
  options.backend = Backend::cuda;
  const TunedConfig config = detail::gemm_plan(p, options)->config();
  EXPECT_EQ(config.source, "tuned") << config.name;
  const auto* space = tune::builtin_config_spaces().find(tune::TuneOp::gemm, Backend::cuda);
  ASSERT_NE(space, nullptr);
  const std::string kernel = config.name.substr(0, config.name.find('+'));
  EXPECT_NE(space->find(kernel), nullptr) << config.name << " is a config of the gemm space";
  gemm(p, options);
  test::expect_cuda(cudaDeviceSynchronize(), "gemm");
  dc.download(c.view);

  test::HostTensor a32 = widened(a.view), w32 = widened(w.view);
  test::HostTensor reference = test::HostTensor::contiguous(DType::f32, {m, n});
  GemmProblem oracle = p;
  oracle.a = a32.view;
  oracle.b = w32.view;
  oracle.c = reference.view;
  RunOptions cpu;
  cpu.backend = Backend::cpu;
  gemm(oracle, cpu);
  EXPECT_FALSE(test::any_nan(c.view)) << "C fully written";
  EXPECT_LE(test::relative_l2(c.view, reference.view), 1.5e-2) << config.name;
  // Known now: the next plan of the shape is a cache hit on the same choice.
  detail::clear_gemm_plans();
  const TunedConfig again = detail::gemm_plan(p, options)->config();
  EXPECT_EQ(again.name, config.name);
  EXPECT_EQ(again.source, "cache");
}

struct RetentionCall {
  test::HostTensor q, k, v, out, grad_out, grad_q, grad_k, grad_v;
};

RetentionCall make_retention_call(DType dtype, int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RetentionCall call;
  call.q = test::HostTensor::contiguous(dtype, {b, t, h, dk});
  call.k = test::HostTensor::contiguous(dtype, {b, t, h, dk});
  call.v = test::HostTensor::contiguous(dtype, {b, t, h, dv});
  call.grad_out = test::HostTensor::contiguous(dtype, {b, t, h, dv});
  for (auto* tensor : {&call.q, &call.k, &call.v, &call.grad_out}) test::fill_random(tensor->view, rng);
  call.out = test::poisoned_tensor(dtype, {b, t, h, dv});
  call.grad_q = test::poisoned_tensor(dtype, {b, t, h, dk});
  call.grad_k = test::poisoned_tensor(dtype, {b, t, h, dk});
  call.grad_v = test::poisoned_tensor(dtype, {b, t, h, dv});
  return call;
}

TEST_F(TunerGemmRetentionGpu, ATunedRetentionForwardAndBackwardMatchTheCpuOracle) {
  // Few sequences, many chunks: the shapes differ in their segments, so there is something to time.
  RetentionCall call = make_retention_call(DType::bf16, 1, 700, 2, 64, 64, 5);
  DeviceCopy q(call.q.view), k(call.k.view), v(call.v.view), out(call.out.view), grad_out(call.grad_out.view),
      grad_q(call.grad_q.view), grad_k(call.grad_k.view), grad_v(call.grad_v.view);
  RunOptions options;
  options.backend = Backend::cuda;
  RetentionForward f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out.view;
  const TunedConfig forward_config = detail::retention_forward_plan(f, options)->config();
  EXPECT_EQ(forward_config.source, "tuned") << forward_config.name;
  retention_forward(f, options);
  RetentionBackward bw;
  bw.q = q.view;
  bw.k = k.view;
  bw.v = v.view;
  bw.grad_out = grad_out.view;
  bw.grad_q = grad_q.view;
  bw.grad_k = grad_k.view;
  bw.grad_v = grad_v.view;
  const TunedConfig backward_config = detail::retention_backward_plan(bw, options)->config();
  EXPECT_EQ(backward_config.source, "tuned") << backward_config.name;
  retention_backward(bw, options);
  test::expect_cuda(cudaDeviceSynchronize(), "retention");
  out.download(call.out.view);
  grad_q.download(call.grad_q.view);
  grad_k.download(call.grad_k.view);
  grad_v.download(call.grad_v.view);

  test::HostTensor q32 = widened(call.q.view), k32 = widened(call.k.view), v32 = widened(call.v.view),
                   g32 = widened(call.grad_out.view);
  test::HostTensor out_ref = test::HostTensor::contiguous(DType::f32, {1, 700, 2, 64});
  test::HostTensor dq_ref = test::HostTensor::contiguous(DType::f32, {1, 700, 2, 64});
  test::HostTensor dk_ref = test::HostTensor::contiguous(DType::f32, {1, 700, 2, 64});
  test::HostTensor dv_ref = test::HostTensor::contiguous(DType::f32, {1, 700, 2, 64});
  RunOptions cpu;
  cpu.backend = Backend::cpu;
  RetentionForward rf;
  rf.q = q32.view;
  rf.k = k32.view;
  rf.v = v32.view;
  rf.out = out_ref.view;
  retention_forward(rf, cpu);
  RetentionBackward rb;
  rb.q = q32.view;
  rb.k = k32.view;
  rb.v = v32.view;
  rb.grad_out = g32.view;
  rb.grad_q = dq_ref.view;
  rb.grad_k = dk_ref.view;
  rb.grad_v = dv_ref.view;
  retention_backward(rb, cpu);
  const std::pair<const TensorView*, const TensorView*> checks[] = {{&call.out.view, &out_ref.view},
                                                                    {&call.grad_q.view, &dq_ref.view},
                                                                    {&call.grad_k.view, &dk_ref.view},
                                                                    {&call.grad_v.view, &dv_ref.view}};
  for (const auto& [got, want] : checks) {
    EXPECT_FALSE(test::any_nan(*got)) << "fully written";
    EXPECT_LE(test::relative_l2(*got, *want), 1.5e-2) << forward_config.name << " / " << backward_config.name;
  }
}

TEST_F(TunerGemmRetentionGpu, AForcedRetentionConfigKeepsPriorityOverTheTuner) {
  RetentionCall call = make_retention_call(DType::bf16, 1, 700, 2, 64, 64, 6);
  DeviceCopy q(call.q.view), k(call.k.view), v(call.v.view), out(call.out.view);
  RetentionForward f;
  f.q = q.view;
  f.k = k.view;
  f.v = v.view;
  f.out = out.view;
  RunOptions options;
  options.backend = Backend::cuda;
  setenv(cuda::retention::kForcedRetentionConfigVariable, "block=32,segments=2", 1);
  detail::clear_retention_plans();
  const TunedConfig config = detail::retention_forward_plan(f, options)->config();
  unsetenv(cuda::retention::kForcedRetentionConfigVariable);
  detail::clear_retention_plans();
  EXPECT_EQ(config.source, "default");
  EXPECT_NE(config.name.find("_dv32_seg2"), std::string::npos) << config.name;
}

TEST_F(TunerGemmRetentionGpu, AForcedGemmEntryKeepsPriorityOverTheTuner) {
  const GemmKernel* simt = nullptr;
  for (const GemmKernel* kernel : gemm_kernels()) {
    if (kernel->tier == cuda::gemm::GemmTier::simt && kernel->dtype == DType::bf16) simt = kernel;
  }
  ASSERT_NE(simt, nullptr);
  test::HostTensor a = test::HostTensor::contiguous(DType::bf16, {64, 64});
  test::HostTensor c = test::HostTensor::contiguous(DType::bf16, {64, 64});
  std::mt19937_64 rng(4);
  test::fill_random(a.view, rng);
  DeviceCopy da(a.view), dc(c.view);
  GemmProblem p;
  p.a = da.view;
  p.b = da.view;
  p.c = dc.view;
  RunOptions options;
  options.backend = Backend::cuda;
  setenv(cuda::gemm::kForcedGemmConfigVariable, simt->name, 1);
  detail::clear_gemm_plans();
  const TunedConfig config = detail::gemm_plan(p, options)->config();
  unsetenv(cuda::gemm::kForcedGemmConfigVariable);
  detail::clear_gemm_plans();
  EXPECT_EQ(config.name, simt->name);
  EXPECT_EQ(config.source, "default");
}

TEST_F(TunerGemmRetentionGpu, TheGemmRunnerTimesEveryValidConfig) {
  const tune::ProblemSpec spec = tune::gemm_problem_spec(DType::bf16, 300, 512, 256, 1, false, true, false);
  cuda::gemm::GemmTuningRunner runner(spec, 0, cuda::device_l2_bytes(0));
  EXPECT_GE(runner.buffer_sets(), 2);
  const tune::ConfigSpace space = cuda::gemm::gemm_space();
  const tune::DeviceLimits limits = cuda::fmha::describe_cuda_device(0).second;
  const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
  ASSERT_FALSE(ranking.valid.empty());
  for (const auto& ranked : ranking.valid) {
    for (int i = 0; i < 3; ++i) EXPECT_GT(runner.measure_seconds(*ranked.config, i), 0.0) << ranked.config->id;
  }
}

TEST_F(TunerGemmRetentionGpu, TheRetentionRunnerTimesEveryValidConfigBothDirections) {
  const tune::DeviceLimits limits = cuda::fmha::describe_cuda_device(0).second;
  for (const tune::TuneOp op : {tune::TuneOp::retention_forward, tune::TuneOp::retention_backward}) {
    const tune::ProblemSpec spec = tune::retention_problem_spec(op, DType::f16, 1, 2, 1000, 64, 128);
    cuda::retention::RetentionTuningRunner runner(spec, 0, cuda::device_l2_bytes(0));
    const tune::ConfigSpace space = op == tune::TuneOp::retention_forward ? cuda::retention::retention_forward_space()
                                                                          : cuda::retention::retention_backward_space();
    const tune::CandidateRanking ranking = tune::rank_candidates(space, spec, limits);
    ASSERT_GT(ranking.valid.size(), 1u);
    for (const auto& ranked : ranking.valid) {
      for (int i = 0; i < 3; ++i) EXPECT_GT(runner.measure_seconds(*ranked.config, i), 0.0) << ranked.config->id;
    }
  }
}

}  // namespace
}  // namespace attnkit

#endif
