// The element-mask path option (AttentionMask::element_path): validation, the plan key, the automatic
// choice's cost model (a pure function: core/element_mask_path.hpp), the C ABI field, the CPU backend
// ignoring it; on CUDA (skipped without a GPU) every path against the CPU oracle, the measurement of a
// mask (its counts, made once per mask tensor) and the choice during CUDA-graph capture.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"
#include "capi/c_api_convert.hpp"
#include "core/attention_plan.hpp"
#include "core/element_mask_path.hpp"
#include "core/validate.hpp"
#include "test_cpu_attention_problem.hpp"
#include "test_support.hpp"
#include "test_validate_problems.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/mask_path/element_mask_measure.hpp"
#include "cuda/mask_path/element_mask_plan.hpp"
#include "cuda/mask_path/element_mask_stats.hpp"
#include "cuda_test_support.hpp"
#endif

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// --- validation and the plan key ------------------------------------------------------------------

AttentionForward element_masked_forward(ElementMaskPath path) {
  AttentionForward p = valid_attention_forward();
  p.mask = element_sparse_mask(view_of(DType::boolean, {1, 1, 30, 30}), path);  // Sq 30, Sk 30
  return p;
}

TEST(ElementMaskPath, EveryPathIsValidWithAnElementMask) {
  for (ElementMaskPath path : {ElementMaskPath::automatic, ElementMaskPath::tiles, ElementMaskPath::scattered}) {
    EXPECT_NO_THROW(detail::validate_attention_forward(element_masked_forward(path), {}));
  }
}

TEST(ElementMaskPath, APathOtherThanAutomaticNeedsAnElementMask) {
  AttentionForward p = valid_attention_forward();
  p.mask = causal_mask();
  p.mask.element_path = ElementMaskPath::tiles;
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("mask.element_path: 1 with mask.kind 1"),
                    HasSubstr("allowed: 0 (automatic) unless mask.kind is 4 (element)")));
  AttentionBackward b = valid_attention_backward();
  b.mask.element_path = ElementMaskPath::scattered;
  EXPECT_THAT(error_message([&] { detail::validate_attention_backward(b, {}); }),
              HasSubstr("mask.element_path: 2 with mask.kind 0"));
}

TEST(ElementMaskPath, AnUnknownPathIsRefusedNamingTheAllowedOnes) {
  AttentionForward p = element_masked_forward(static_cast<ElementMaskPath>(3));
  EXPECT_THAT(error_message([&] { detail::validate_attention_forward(p, {}); }),
              AllOf(HasSubstr("mask.element_path: 3"), HasSubstr("allowed: 0 (automatic), 1 (tiles), 2 (scattered)")));
}

TEST(ElementMaskPath, ThePlanKeyDiffersByPath) {
  const detail::PlanKey automatic =
      detail::attention_forward_key(element_masked_forward(ElementMaskPath::automatic), {});
  const detail::PlanKey tiles = detail::attention_forward_key(element_masked_forward(ElementMaskPath::tiles), {});
  const detail::PlanKey scattered =
      detail::attention_forward_key(element_masked_forward(ElementMaskPath::scattered), {});
  EXPECT_FALSE(automatic == tiles);
  EXPECT_FALSE(automatic == scattered);
  EXPECT_FALSE(tiles == scattered);
  EXPECT_TRUE(tiles == detail::attention_forward_key(element_masked_forward(ElementMaskPath::tiles), {}));
}

// --- the cost model -------------------------------------------------------------------------------

// S x S, H heads, D = Dv = d, bf16, a broadcast mask with 128 x 64 tiles.
detail::ElementPathProblem model_problem(int64_t s, int64_t heads = 16, int64_t d = 64, bool backward = false) {
  detail::ElementPathProblem p;
  p.batch = 1;
  p.heads_q = heads;
  p.seq_q = s;
  p.seq_k = s;
  p.head_dim = d;
  p.head_dim_v = d;
  p.element_bytes = 2;
  p.backward = backward;
  p.block_m = 128;
  p.block_n = 64;
  return p;
}

// A uniformly scattered mask of `density` over `slices` slices: every tile holds true entries, none is full.
detail::ElementMaskStats scattered_stats(const detail::ElementPathProblem& p, double density, int64_t slices = 1) {
  const int64_t tiles = (p.seq_q / p.block_m) * (p.seq_k / p.block_n) * slices;
  detail::ElementMaskStats stats;
  stats.slices = slices;
  stats.true_entries = static_cast<int64_t>(density * static_cast<double>(p.seq_q * p.seq_k * slices));
  stats.nonempty_tiles = tiles;
  stats.full_tiles = 0;
  return stats;
}

TEST(ElementMaskPathChoice, SparseScatteredMasksTakeTheScatteredPath) {
  for (int64_t s : {4096, 8192, 16384, 32768}) {
    for (double density : {0.001, 0.01}) {
      const auto p = model_problem(s);
      EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, density)), ElementMaskPath::scattered)
          << "S " << s << ", density " << density;
    }
  }
}

TEST(ElementMaskPathChoice, DenseIshMasksTakeTheTiles) {
  for (double density : {0.3, 0.5, 0.9}) {
    const auto p = model_problem(8192);
    EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, density)), ElementMaskPath::tiles) << density;
  }
}

// Measured (docs/perf.md, forward, S 8192, H 16): on an H100 the scattered path wins at 3 % for D 64 (0.694
// against 0.757 ms) and the tile path at 1 % for D 128 (0.945 against 0.998); on an H200 the tile path at 10 % for
// D 64 (1.06 against 2.2 ms) and the scattered path at 0.1 % for D 128 (0.97 against 1.24).
TEST(ElementMaskPathChoice, TheForwardCrossoverOfAScatteredMaskIsTheMeasuredOne) {
  const std::vector<std::tuple<int64_t, double, double>> measured{{64, 0.03, 0.10}, {128, 0.001, 0.01}};
  for (const auto& [d, scattered_wins, tiles_win] : measured) {
    const auto p = model_problem(8192, 16, d);
    EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, scattered_wins)), ElementMaskPath::scattered) << d;
    EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, tiles_win)), ElementMaskPath::tiles) << d;
    // Monotone: once tiles win, they keep winning as the density grows.
    bool tiles_won = false;
    for (int percent = 1; percent <= 100; ++percent) {
      const bool tiles = detail::choose_element_path(p, scattered_stats(p, percent / 100.0)) == ElementMaskPath::tiles;
      EXPECT_TRUE(tiles || !tiles_won) << percent << " %, D " << d;
      tiles_won = tiles_won || tiles;
    }
  }
}

TEST(ElementMaskPathChoice, TrueEntriesClusteredInFullTilesTakeTheTiles) {
  // 1 % of the entries, all in whole tiles: tile skipping already does only the useful work.
  const auto p = model_problem(8192);
  detail::ElementMaskStats stats = scattered_stats(p, 0.01);
  stats.nonempty_tiles = stats.true_entries / (p.block_m * p.block_n);
  stats.full_tiles = stats.nonempty_tiles;
  EXPECT_EQ(detail::choose_element_path(p, stats), ElementMaskPath::tiles);
}

TEST(ElementMaskPathChoice, APerHeadMaskDecidesLikeTheBroadcastOneOfTheSameDensity) {
  const auto p = model_problem(4096);
  for (double density : {0.01, 0.5}) {
    EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, density, 1)),
              detail::choose_element_path(p, scattered_stats(p, density, p.heads_q)))
        << density;
  }
  const detail::ElementPathCosts one = detail::element_path_costs(p, scattered_stats(p, 0.01, 1));
  const detail::ElementPathCosts per_head = detail::element_path_costs(p, scattered_stats(p, 0.01, p.heads_q));
  EXPECT_GT(per_head.tiles_seconds, one.tiles_seconds);  // the per-head mask is read 16 times over
}

// Measured on an H100 (S 8192, H 16, bf16; docs/perf.md, 2026-11-28), backward alone: the scattered path wins at
// 1 % and 3 % for D 64 (1.34 and 2.15 against the tile path's 2.71 and 2.69 ms) and at 1 % for D 128 (2.77 against
// 4.50 ms); near-dense masks and whole tiles keep the tile path.
TEST(ElementMaskPathChoice, TheBackwardCrossoverIsTheMeasuredOne) {
  const auto p = model_problem(8192, 16, 64, true);
  EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, 0.01)), ElementMaskPath::scattered);
  EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, 0.03)), ElementMaskPath::scattered);
  EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, 0.3)), ElementMaskPath::tiles);
  EXPECT_EQ(detail::choose_element_path(p, scattered_stats(p, 0.5)), ElementMaskPath::tiles);
  detail::ElementMaskStats whole = scattered_stats(p, 0.5);
  whole.nonempty_tiles /= 2;
  whole.full_tiles = whole.nonempty_tiles;
  EXPECT_EQ(detail::choose_element_path(p, whole), ElementMaskPath::tiles);
  const auto wide = model_problem(8192, 16, 128, true);
  EXPECT_EQ(detail::choose_element_path(wide, scattered_stats(wide, 0.01)), ElementMaskPath::scattered);
  EXPECT_EQ(detail::choose_element_path(wide, scattered_stats(wide, 0.3)), ElementMaskPath::tiles);
}

// The model against the measured rows it was fitted to (H100, S 8192, H 16, bf16, docs/perf.md): within 10 %.
TEST(ElementMaskPathChoice, TheEstimatesMatchTheMeasuredTimes) {
  struct Row {
    int64_t d;
    bool backward;
    double density;
    double tiles_ms, scattered_ms;
  };
  // The measured masks hold the diagonal too: 1/8192 more true entries.
  const double diagonal = 1.0 / 8192;
  for (const Row& row : std::vector<Row>{{64, false, 0.001, 0.730, 0.245},
                                         {64, false, 0.01, 0.733, 0.409},
                                         {64, false, 0.03, 0.757, 0.694},
                                         {128, false, 0.01, 0.945, 0.998},
                                         {64, true, 0.001, 2.764, 0.869},
                                         {64, true, 0.01, 2.707, 1.344},
                                         {64, true, 0.03, 2.686, 2.148},
                                         {128, true, 0.01, 4.501, 2.766}}) {
    const auto p = model_problem(8192, 16, row.d, row.backward);
    const detail::ElementPathCosts costs = detail::element_path_costs(p, scattered_stats(p, row.density + diagonal));
    EXPECT_NEAR(costs.tiles_seconds * 1e3, row.tiles_ms, 0.1 * row.tiles_ms) << row.d << " " << row.density;
    EXPECT_NEAR(costs.scattered_seconds * 1e3, row.scattered_ms, 0.1 * row.scattered_ms) << row.d << " " << row.density;
  }
}

// --- the C ABI ------------------------------------------------------------------------------------

TEST(ElementMaskPathCAbi, InitMeansAutomaticAndTheFieldRoundTrips) {
  attnkit_attention_forward_args forward;
  attnkit_attention_forward_args_init(&forward);
  EXPECT_EQ(forward.mask.element_path, ATTNKIT_ELEMENT_PATH_AUTOMATIC);
  EXPECT_EQ(capi::to_attention_forward(forward).mask.element_path, ElementMaskPath::automatic);
  for (int32_t path : {ATTNKIT_ELEMENT_PATH_TILES, ATTNKIT_ELEMENT_PATH_SCATTERED}) {
    forward.mask.element_path = path;
    EXPECT_EQ(static_cast<int32_t>(capi::to_attention_forward(forward).mask.element_path), path);
  }
  attnkit_attention_backward_args backward;
  attnkit_attention_backward_args_init(&backward);
  EXPECT_EQ(backward.mask.element_path, ATTNKIT_ELEMENT_PATH_AUTOMATIC);
  backward.mask.element_path = ATTNKIT_ELEMENT_PATH_SCATTERED;
  EXPECT_EQ(capi::to_attention_backward(backward).mask.element_path, ElementMaskPath::scattered);
}

TEST(ElementMaskPathCAbi, AnOutOfRangeFieldIsRefusedBeforeConversion) {
  attnkit_attention_forward_args forward;
  attnkit_attention_forward_args_init(&forward);
  forward.mask.element_path = -1;
  EXPECT_THAT(error_message([&] { capi::to_attention_forward(forward); }),
              AllOf(HasSubstr("mask.element_path: -1"), HasSubstr("allowed: 0 (ATTNKIT_ELEMENT_PATH_AUTOMATIC)")));
}

TEST(ElementMaskPathCAbi, TheCallReportsTheLibrarysMessage) {
  HostTensor q = HostTensor::contiguous(DType::f32, {1, 4, 1, 8});
  HostTensor out = HostTensor::contiguous(DType::f32, {1, 4, 1, 8});
  std::mt19937_64 rng(1);
  fill_random(q.view, rng);
  poison_nan(out.view);
  attnkit_attention_forward_args args;
  attnkit_attention_forward_args_init(&args);
  args.q = args.k = args.v = capi::to_c_tensor(q.view);
  args.out = capi::to_c_tensor(out.view);
  args.mask.element_path = ATTNKIT_ELEMENT_PATH_TILES;  // with mask kind none
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(attnkit_last_error()), HasSubstr("mask.element_path: 1 with mask.kind 0"));
  EXPECT_FALSE(all_finite(out.view));  // nothing written
  args.mask.element_path = ATTNKIT_ELEMENT_PATH_AUTOMATIC;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << attnkit_last_error();
}

// --- the CPU backend ignores the path -------------------------------------------------------------

TEST(ElementMaskPathCpu, EveryPathGivesBitIdenticalResults) {
  std::mt19937_64 rng(24);
  HostTensor mask = HostTensor::contiguous(DType::boolean, {1, 2, 37, 41});
  fill_random_bool(mask.view, rng, 0.3);
  AttentionCase c;
  c.batch = 1;
  c.tokens = {37};
  c.tokens_kv = {41};
  c.dtype = DType::f32;
  c.mask = element_sparse_mask(mask.view);
  AttentionTensors automatic(c);
  automatic.run_forward();
  automatic.run_backward();
  for (ElementMaskPath path : {ElementMaskPath::tiles, ElementMaskPath::scattered}) {
    c.mask.element_path = path;
    AttentionTensors t(c);  // same seed: same inputs
    t.run_forward();
    t.run_backward();
    EXPECT_EQ(max_abs_difference(t.out.view, automatic.out.view), 0.0);
    EXPECT_EQ(max_abs_difference(t.lse.view, automatic.lse.view), 0.0);
    EXPECT_EQ(max_abs_difference(t.grad_q.view, automatic.grad_q.view), 0.0);
    EXPECT_EQ(max_abs_difference(t.grad_k.view, automatic.grad_k.view), 0.0);
    EXPECT_EQ(max_abs_difference(t.grad_v.view, automatic.grad_v.view), 0.0);
  }
}

#if defined(ATTNKIT_WITH_CUDA)

// --- CUDA -----------------------------------------------------------------------------------------

#define SKIP_WITHOUT_GPU()                                                                   \
  if (!cuda_device_present()) {                                                              \
    GTEST_SKIP() << "no CUDA device: the element-mask path tests need a GPU (skipped here)"; \
  }

// A mask [mask_heads, S, S] on host and device: true with `density`, plus the diagonal when `diagonal`.
struct GpuMask {
  TestTensor tensor;
  GpuMask(int64_t mask_heads, int64_t seq_q, int64_t seq_k, double density, bool diagonal, uint64_t seed) {
    tensor = TestTensor::make(DType::boolean, {1, mask_heads, seq_q, seq_k}, {0, 0, 0, 0});
    std::mt19937_64 rng(seed);
    fill_random_bool(tensor.host, rng, density);
    if (diagonal) {
      for (int64_t h = 0; h < mask_heads; ++h) {
        for (int64_t i = 0; i < std::min(seq_q, seq_k); ++i) set_element(tensor.host, {0, h, i, i}, 1.0);
      }
    }
    tensor.upload();
  }
};

// One attention problem on the GPU (bf16, contiguous) with its CPU oracle (fp32 copies).
struct GpuProblem {
  int64_t heads = 2;
  int64_t seq = 0;
  int64_t dim = 64;
  TestTensor q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v;

  GpuProblem(int64_t heads_, int64_t seq_, uint64_t seed) : heads(heads_), seq(seq_) {
    const std::vector<int64_t> x{1, seq, heads, dim};
    const std::vector<int64_t> none{0, 0, 0, 0};
    std::mt19937_64 rng(seed);
    for (TestTensor* t : {&q, &k, &v, &grad_out}) {
      *t = TestTensor::make(DType::bf16, x, none);
      fill_random(t->host, rng);
      t->upload();
    }
    for (TestTensor* t : {&out, &grad_q, &grad_k, &grad_v}) *t = TestTensor::make(DType::bf16, x, none);
    lse = TestTensor::make(DType::f32, {1, seq, heads}, {0, 0, 0});
  }

  // The fields both directions' problems share: q, k, v, out, lse and the mask (a one-head mask given
  // over the heads).
  template <class Problem>
  Problem problem(const TensorView& mask, ElementMaskPath path) const {
    Problem p;
    p.q = q.device;
    p.k = k.device;
    p.v = v.device;
    p.out = out.device;
    p.lse = lse.device;
    p.mask = element_sparse_mask(expanded_over_heads(mask, mask.extents[1] == 1 ? heads : 0), path);
    return p;
  }

  AttentionForward forward(const TensorView& mask, ElementMaskPath path) const {
    return problem<AttentionForward>(mask, path);
  }

  AttentionBackward backward(const TensorView& mask, ElementMaskPath path) const {
    AttentionBackward p = problem<AttentionBackward>(mask, path);
    p.grad_out = grad_out.device;
    p.grad_q = grad_q.device;
    p.grad_k = grad_k.device;
    p.grad_v = grad_v.device;
    return p;
  }

  // The CPU oracle's forward and backward (fp32) on the same inputs and mask; its backward uses its own
  // forward's out and lse.
  void expect_matches_oracle(const GpuMask& mask, bool with_backward) {
    out.download();
    lse.download();
    TensorView qf, kf, vf, gof;
    HostTensor q32 = widen_to_f32(q, qf), k32 = widen_to_f32(k, kf), v32 = widen_to_f32(v, vf),
               go32 = widen_to_f32(grad_out, gof);
    HostTensor ref_out = HostTensor::contiguous(DType::f32, {1, seq, heads, dim});
    HostTensor ref_lse = HostTensor::contiguous(DType::f32, {1, seq, heads});
    AttentionForward f;
    f.q = qf;
    f.k = kf;
    f.v = vf;
    f.out = ref_out.view;
    f.lse = ref_lse.view;
    f.mask = element_sparse_mask(expanded_over_heads(mask.tensor.host, mask.tensor.host.extents[1] == 1 ? heads : 0));
    RunOptions cpu;
    cpu.backend = Backend::cpu;
    attention_forward(f, cpu);
    EXPECT_LE(relative_l2(out.host, ref_out.view), 1.5e-2);
    EXPECT_LE(relative_l2(lse.host, ref_lse.view), 1e-3);
    if (!with_backward) return;
    grad_q.download();
    grad_k.download();
    grad_v.download();
    HostTensor rq = HostTensor::contiguous(DType::f32, {1, seq, heads, dim});
    HostTensor rk = HostTensor::contiguous(DType::f32, {1, seq, heads, dim});
    HostTensor rv = HostTensor::contiguous(DType::f32, {1, seq, heads, dim});
    AttentionBackward b;
    b.q = qf;
    b.k = kf;
    b.v = vf;
    b.out = ref_out.view;
    b.lse = ref_lse.view;
    b.grad_out = gof;
    b.grad_q = rq.view;
    b.grad_k = rk.view;
    b.grad_v = rv.view;
    b.mask = f.mask;
    attention_backward(b, cpu);
    EXPECT_LE(relative_l2(grad_q.host, rq.view), 2e-2);
    EXPECT_LE(relative_l2(grad_k.host, rk.view), 2e-2);
    EXPECT_LE(relative_l2(grad_v.host, rv.view), 2e-2);
  }
};

struct PathCase {
  ElementMaskPath path;
  double density;
  int64_t mask_heads;  // 1: broadcast over heads
  int64_t seq;
  bool diagonal;
};

class ElementMaskPathCuda : public ::testing::TestWithParam<PathCase> {};

TEST_P(ElementMaskPathCuda, ForwardAndBackwardMatchTheOracle) {
  SKIP_WITHOUT_GPU();
  const PathCase c = GetParam();
  GpuProblem problem(2, c.seq, 7);
  GpuMask mask(c.mask_heads, c.seq, c.seq, c.density, c.diagonal, 11);
  attention_forward(problem.forward(mask.tensor.device, c.path));
  attention_backward(problem.backward(mask.tensor.device, c.path));
  expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  problem.expect_matches_oracle(mask, true);
}

std::string path_case_name(const ::testing::TestParamInfo<PathCase>& info) {
  static const char* const names[] = {"automatic", "tiles", "scattered"};
  return std::string(names[static_cast<int>(info.param.path)]) + "_permille" +
         std::to_string(static_cast<int>(info.param.density * 1000)) + "_heads" +
         std::to_string(info.param.mask_heads) + "_s" + std::to_string(info.param.seq);
}

INSTANTIATE_TEST_SUITE_P(PathsAndMasks, ElementMaskPathCuda,
                         ::testing::Values(PathCase{ElementMaskPath::tiles, 0.01, 1, 333, true},
                                           PathCase{ElementMaskPath::scattered, 0.01, 1, 333, true},
                                           PathCase{ElementMaskPath::automatic, 0.01, 1, 333, true},
                                           PathCase{ElementMaskPath::tiles, 0.3, 2, 200, false},
                                           PathCase{ElementMaskPath::scattered, 0.3, 2, 200, false},
                                           PathCase{ElementMaskPath::automatic, 0.3, 2, 200, false},
                                           PathCase{ElementMaskPath::scattered, 0.001, 2, 257, false},  // empty rows
                                           PathCase{ElementMaskPath::automatic, 0.001, 2, 257, false}),
                         path_case_name);

TEST(ElementMaskMeasurement, CountsMatchTheHostCount) {
  SKIP_WITHOUT_GPU();
  for (const auto& [heads, seq_q, seq_k, density] : std::vector<std::tuple<int64_t, int64_t, int64_t, double>>{
           {1, 300, 301, 0.02}, {3, 129, 64, 0.5}, {2, 77, 190, 1.0}}) {
    GpuMask mask(heads, seq_q, seq_k, density, false, 3);
    const int block_m = 128;
    const int block_n = 64;
    detail::ElementMaskStats expected;
    expected.slices = heads;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t m0 = 0; m0 < seq_q; m0 += block_m) {
        for (int64_t n0 = 0; n0 < seq_k; n0 += block_n) {
          int64_t count = 0, cells = 0;
          for (int64_t i = m0; i < std::min(seq_q, m0 + block_m); ++i) {
            for (int64_t j = n0; j < std::min(seq_k, n0 + block_n); ++j) {
              count += element_at(mask.tensor.host, {0, h, i, j}) != 0.0 ? 1 : 0;
              ++cells;
            }
          }
          expected.true_entries += count;
          expected.nonempty_tiles += count > 0 ? 1 : 0;
          expected.full_tiles += count == cells ? 1 : 0;
        }
      }
    }
    const detail::ElementMaskStats got =
        cuda::mask_path::measure_element_mask(mask.tensor.device, seq_q, seq_k, block_m, block_n, nullptr);
    EXPECT_EQ(got.slices, expected.slices);
    EXPECT_EQ(got.true_entries, expected.true_entries) << heads << " x " << seq_q << " x " << seq_k;
    EXPECT_EQ(got.nonempty_tiles, expected.nonempty_tiles);
    EXPECT_EQ(got.full_tiles, expected.full_tiles);
  }
}

TEST(ElementMaskMeasurement, AMaskExpandedOverHeadsIsOneSliceReadOnce) {
  SKIP_WITHOUT_GPU();
  GpuMask mask(1, 200, 130, 0.1, false, 8);
  const detail::ElementMaskStats one =
      cuda::mask_path::measure_element_mask(mask.tensor.device, 200, 130, 128, 64, nullptr);
  const detail::ElementMaskStats expanded =
      cuda::mask_path::measure_element_mask(expanded_over_heads(mask.tensor.device, 8), 200, 130, 128, 64, nullptr);
  EXPECT_EQ(expanded.slices, 1);
  EXPECT_EQ(expanded.true_entries, one.true_entries);
  EXPECT_EQ(expanded.nonempty_tiles, one.nonempty_tiles);
}

TEST(ElementMaskMeasurement, TheSameMaskTensorIsMeasuredOnce) {
  SKIP_WITHOUT_GPU();
  GpuProblem problem(2, 256, 5);
  GpuMask first(1, 256, 256, 0.02, true, 1);
  GpuMask second(1, 256, 256, 0.02, true, 2);
  cuda::mask_path::clear_element_mask_stats();
  const int64_t before = cuda::mask_path::element_mask_measurements();
  for (int run = 0; run < 3; ++run) attention_forward(problem.forward(first.tensor.device, ElementMaskPath::automatic));
  const int64_t after_first = cuda::mask_path::element_mask_measurements();
  attention_forward(problem.forward(second.tensor.device, ElementMaskPath::automatic));
  const int64_t after_second = cuda::mask_path::element_mask_measurements();
  expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  // Forced paths never measure.
  attention_forward(problem.forward(first.tensor.device, ElementMaskPath::tiles));
  const int64_t after_forced = cuda::mask_path::element_mask_measurements();
  // Either the scattered path cannot run this call (then automatic is the tiles plan: nothing measured)
  // or it measured each mask exactly once.
  EXPECT_TRUE(after_first - before == 1 || after_first == before) << after_first - before;
  EXPECT_EQ(after_second - after_first, after_first - before);
  EXPECT_EQ(after_forced, after_second);
}

TEST(ElementMaskMeasurement, CaptureMeasuresNothingAndUsesTheCachedChoiceElseTiles) {
  SKIP_WITHOUT_GPU();
  GpuProblem problem(2, 256, 9);
  GpuMask warm(1, 256, 256, 0.01, true, 4);
  GpuMask mask(1, 256, 256, 0.01, true, 5);
  cudaStream_t stream = nullptr;
  expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  RunOptions options;
  options.stream = stream;
  options.no_tuning = true;
  // The plan is made (and any tuning done) outside the capture, on another mask tensor.
  attention_forward(problem.forward(warm.tensor.device, ElementMaskPath::automatic), options);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda::mask_path::clear_element_mask_stats();
  const int64_t measured = cuda::mask_path::element_mask_measurements();
  const int64_t scattered_runs = cuda::mask_path::element_path_runs(ElementMaskPath::scattered);
  {
    StreamCapture capture(stream);
    ASSERT_TRUE(capture.began());
    attention_forward(problem.forward(mask.tensor.device, ElementMaskPath::automatic), options);
    cudaGraph_t graph = capture.end();
    ASSERT_NE(graph, nullptr);
    cudaGraphExec_t exec = nullptr;
    expect_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    expect_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  EXPECT_EQ(cuda::mask_path::element_mask_measurements(), measured);
  EXPECT_EQ(cuda::mask_path::element_path_runs(ElementMaskPath::scattered), scattered_runs);  // uncached: tiles
  problem.expect_matches_oracle(mask, false);

  // Measured outside a capture, the mask's choice is then used inside one, unmeasured.
  attention_forward(problem.forward(mask.tensor.device, ElementMaskPath::automatic), options);
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const int64_t measured_after = cuda::mask_path::element_mask_measurements();
  const int64_t scattered_after = cuda::mask_path::element_path_runs(ElementMaskPath::scattered);
  {
    StreamCapture capture(stream);
    ASSERT_TRUE(capture.began());
    attention_forward(problem.forward(mask.tensor.device, ElementMaskPath::automatic), options);
    cudaGraph_t graph = capture.end();
    ASSERT_NE(graph, nullptr);
    cudaGraphDestroy(graph);
  }
  EXPECT_EQ(cuda::mask_path::element_mask_measurements(), measured_after);
  // Inside the capture the cached choice is taken: the same path as the measured run outside it.
  const int64_t scattered_delta = cuda::mask_path::element_path_runs(ElementMaskPath::scattered) - scattered_after;
  EXPECT_EQ(scattered_delta, scattered_after - scattered_runs);
  cudaStreamDestroy(stream);
}

TEST(ElementMaskPathCuda, ForcingAnUnsupportedScatteredPathSaysWhy) {
  SKIP_WITHOUT_GPU();
  GpuProblem problem(2, 64, 3);
  GpuMask mask(1, 64, 64, 0.1, true, 6);
  AttentionForward p = problem.forward(mask.tensor.device, ElementMaskPath::scattered);
  try {
    attention_forward(p);
    SUCCEED() << "the scattered path runs this call";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), Status::unsupported) << error.what();
    EXPECT_THAT(std::string(error.what()), HasSubstr("mask.element_path: 2 (scattered) cannot run this call"));
  }
}

#endif  // ATTNKIT_WITH_CUDA

}  // namespace
}  // namespace attnkit::test
