// Plans of the attention ops (src/core/plan_key.hpp, plan_cache.hpp, op_plan.hpp, attention_plan.hpp) and the
// C ABI's plan handles (attnkit_attention_*_plan, attnkit_plan_run): a call shape is validated and its
// config chosen once, keyed by every argument that decides them and by nothing that changes from call to
// call; a plan run on new tensors of its shape gives the bits a call on those tensors gives; the tuner's
// settings and RunOptions::no_tuning decide what a new plan may time. CPU tensors: runs in every build.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"
#include "capi/c_api_convert.hpp"
#include "core/attention_plan.hpp"
#include "core/plan_key.hpp"
#include "test_capi_plan_support.hpp"
#include "test_cpu_attention_problem.hpp"
#include "test_support.hpp"
#include "test_tune_support.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit {
namespace {

using test::AttentionCase;
using test::AttentionTensors;
using test::c_cpu_options;
using test::HostTensor;
using test::PlanHandle;
using test::run_plan;
using ::testing::AllOf;
using ::testing::HasSubstr;
using tune::testing::TempDir;

// ---------------------------------------------------------------------------------------------------------
// Shared set-up

RunOptions cpu_options() {
  RunOptions options;
  options.backend = Backend::cpu;
  return options;
}

// Tuning off: every plan runs the default config, so two plans of one shape choose alike. Tests that tune
// configure their own settings; every test leaves a fresh process state and no cached plan behind.
class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tune::reset_process_tuners();
    TunerSettings settings;
    settings.mode = TuneMode::off;
    configure_tuner(settings);
    detail::clear_attention_plans();
  }
  void TearDown() override {
    tune::reset_process_tuners();
    detail::clear_attention_plans();
  }

  // Tuning on, as fast as it goes, writing winners to `cache_dir`.
  static void tune_into(const std::string& cache_dir) {
    TunerSettings s;
    s.mode = TuneMode::on;
    s.warmup_steps_forward = s.warmup_steps_backward = 0;
    s.steps_forward = s.steps_backward = 2;
    s.top_k = 2;
    s.cache_dir = cache_dir;
    configure_tuner(s);
  }
};

AttentionCase causal_case(uint64_t seed) {
  AttentionCase c;
  c.batch = 1;
  c.tokens = {13};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = 8;
  c.dtype = DType::f32;
  c.mask = causal_mask();
  c.seed = seed;
  return c;
}

// Whether no element of the view was written since it was poisoned.
bool all_nan(const TensorView& view) {
  for (const double value : test::to_doubles(view)) {
    if (!std::isnan(value)) return false;
  }
  return true;
}

bool same_alignment(const TensorView& a, const TensorView& b) {
  return detail::address_alignment_bits(a.data) == detail::address_alignment_bits(b.data);
}

// Whether two tensor sets of one case have the same address alignment everywhere: the precondition of every
// test that runs one set's plan on the other (host buffers are 16-byte aligned, so they do).
bool same_alignment(const AttentionTensors& a, const AttentionTensors& b) {
  const std::vector<std::pair<const HostTensor*, const HostTensor*>> pairs = {
      {&a.q, &b.q},           {&a.k, &b.k},           {&a.v, &b.v},
      {&a.out, &b.out},       {&a.lse, &b.lse},       {&a.grad_out, &b.grad_out},
      {&a.grad_q, &b.grad_q}, {&a.grad_k, &b.grad_k}, {&a.grad_v, &b.grad_v}};
  for (const auto& [x, y] : pairs) {
    if (!same_alignment(x->view, y->view)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// PlanKey: what enters the key. Views at fake, never dereferenced, 256-byte aligned addresses.

void* fake_address(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

AttentionForward fake_forward(std::uintptr_t base) {
  AttentionForward p;
  p.q = make_view(fake_address(base + 0x00000), DType::f32, {2, 11, 4, 16});
  p.k = make_view(fake_address(base + 0x10000), DType::f32, {2, 11, 2, 16});
  p.v = make_view(fake_address(base + 0x20000), DType::f32, {2, 11, 2, 16});
  p.out = make_view(fake_address(base + 0x30000), DType::f32, {2, 11, 4, 16});
  p.lse = make_view(fake_address(base + 0x40000), DType::f32, {2, 11, 4});
  p.mask = causal_mask();
  return p;
}

AttentionBackward fake_backward(std::uintptr_t base) {
  const AttentionForward f = fake_forward(base);
  AttentionBackward p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.lse = f.lse;
  p.grad_out = make_view(fake_address(base + 0x50000), DType::f32, {2, 11, 4, 16});
  p.grad_q = make_view(fake_address(base + 0x60000), DType::f32, {2, 11, 4, 16});
  p.grad_k = make_view(fake_address(base + 0x70000), DType::f32, {2, 11, 2, 16});
  p.grad_v = make_view(fake_address(base + 0x80000), DType::f32, {2, 11, 2, 16});
  p.mask = causal_mask();
  return p;
}

void shift(TensorView& view, std::ptrdiff_t bytes) {
  if (view.defined()) view.data = static_cast<std::byte*>(view.data) + bytes;
}

TensorView fake_bool(std::uintptr_t address, std::initializer_list<int64_t> extents) {
  return make_view(fake_address(address), DType::boolean, extents);
}

TEST(PlanKey, IsEqualForCallsThatDifferOnlyInDataPointersOfTheSameAlignment) {
  AttentionForward a = fake_forward(0x10000000);
  a.mask = block_sparse_mask(fake_bool(0x1f000000, {1, 4, 2, 1}), 8, 16);
  AttentionForward b = fake_forward(0x70000000);
  b.mask = block_sparse_mask(fake_bool(0x7f000000, {1, 4, 2, 1}), 8, 16);
  // Every pointer moved by its own multiple of 16.
  std::ptrdiff_t step = 16;
  for (TensorView* view : {&b.q, &b.k, &b.v, &b.out, &b.lse, &b.mask.block_mask}) shift(*view, step += 32);
  const detail::PlanKey key_a = detail::attention_forward_key(a, cpu_options());
  const detail::PlanKey key_b = detail::attention_forward_key(b, cpu_options());
  EXPECT_TRUE(key_a == key_b);
  EXPECT_EQ(key_a.hash(), key_b.hash());
}

TEST(PlanKey, IsEqualForBackwardCallsThatDifferOnlyInDataPointersOfTheSameAlignment) {
  const AttentionBackward a = fake_backward(0x10000000);
  AttentionBackward b = fake_backward(0x70000000);
  for (TensorView* view : {&b.q, &b.k, &b.v, &b.out, &b.lse, &b.grad_out, &b.grad_q, &b.grad_k, &b.grad_v}) {
    shift(*view, 4096 + 48);
  }
  const detail::PlanKey key_a = detail::attention_backward_key(a, cpu_options());
  const detail::PlanKey key_b = detail::attention_backward_key(b, cpu_options());
  EXPECT_TRUE(key_a == key_b);
  EXPECT_EQ(key_a.hash(), key_b.hash());
}

TEST(PlanKey, IgnoresTheStreamAndTheWorkspace) {
  const AttentionForward p = fake_forward(0x10000000);
  RunOptions other = cpu_options();
  other.stream = fake_address(0x1234);
  other.workspace = fake_address(0x20000000);
  other.workspace_bytes = 1 << 20;
  EXPECT_TRUE(detail::attention_forward_key(p, cpu_options()) == detail::attention_forward_key(p, other));
}

// One argument changed against a base call; `setup` (optional) makes the base call of that change.
struct ForwardChange {
  const char* name;
  std::function<void(AttentionForward&, RunOptions&)> apply;
  std::function<void(AttentionForward&, RunOptions&)> setup = nullptr;
};

struct BackwardChange {
  const char* name;
  std::function<void(AttentionBackward&, RunOptions&)> apply;
  std::function<void(AttentionBackward&, RunOptions&)> setup = nullptr;
};

void PrintTo(const ForwardChange& change, std::ostream* os) { *os << change.name; }
void PrintTo(const BackwardChange& change, std::ostream* os) { *os << change.name; }

void use_neighborhood(AttentionForward& p, RunOptions&) {
  p.q = make_view(p.q.data, DType::f32, {2, 5, 7, 4, 16});
  p.k = make_view(p.k.data, DType::f32, {2, 5, 7, 2, 16});
  p.v = make_view(p.v.data, DType::f32, {2, 5, 7, 2, 16});
  p.out = make_view(p.out.data, DType::f32, {2, 5, 7, 4, 16});
  p.lse = make_view(p.lse.data, DType::f32, {2, 5, 7, 4});
  p.mask = neighborhood_mask({3, 5}, {1, 1}, {1, 2}, {false, true});
}

void use_block_mask(AttentionForward& p, RunOptions&) {
  p.mask = block_sparse_mask(fake_bool(0x5f000000, {1, 4, 2, 1}), 8, 16);
}

void use_element_mask(AttentionForward& p, RunOptions&) {
  p.mask = element_sparse_mask(fake_bool(0x5f000000, {1, 4, 11, 11}));
}

std::vector<ForwardChange> forward_changes() {
  using P = AttentionForward;
  using O = RunOptions;
  return {
      {"QPointerAlignment", [](P& p, O&) { shift(p.q, 4); }},
      {"OutPointerAlignment", [](P& p, O&) { shift(p.out, 8); }},
      {"LsePointerAlignment", [](P& p, O&) { shift(p.lse, 12); }},
      {"QStride", [](P& p, O&) { p.q.strides[0] += 64; }},
      {"VTokenStride", [](P& p, O&) { p.v.strides[1] = 64; }},
      {"KExtent", [](P& p, O&) { p.k.extents[1] = 12; }},
      {"OutRank", [](P& p, O&) { p.out.rank = 3; }},
      {"VDtype", [](P& p, O&) { p.v.dtype = DType::f64; }},
      {"QDevice",
       [](P& p, O&) {
         p.q.device = Device{DeviceType::cuda, 0};
       }},
      {"QDeviceIndex", [](P& p, O&) { p.q.device.index = 1; }},
      {"LseAbsent", [](P& p, O&) { p.lse = TensorView{}; }},
      {"ScaleGiven", [](P& p, O&) { p.scale = 0.25; }},
      {"ScaleValue", [](P& p, O&) { p.scale = 0.5; }, [](P& p, O&) { p.scale = 0.25; }},
      {"MaskKind", [](P& p, O&) { p.mask = AttentionMask{}; }},
      {"CausalAlignment", [](P& p, O&) { p.mask.causal_alignment = CausalAlignment::bottom_right; }},
      {"NeighborhoodKernelSize", [](P& p, O&) { p.mask.neighborhood[0].kernel_size = 5; }, use_neighborhood},
      {"NeighborhoodDilation", [](P& p, O&) { p.mask.neighborhood[1].dilation = 2; }, use_neighborhood},
      {"NeighborhoodStride", [](P& p, O&) { p.mask.neighborhood[1].stride = 1; }, use_neighborhood},
      {"NeighborhoodCausal", [](P& p, O&) { p.mask.neighborhood[0].causal = true; }, use_neighborhood},
      {"BlockQ", [](P& p, O&) { p.mask.block_q = 16; }, use_block_mask},
      {"BlockK", [](P& p, O&) { p.mask.block_k = 8; }, use_block_mask},
      {"BlockMaskExtent", [](P& p, O&) { p.mask.block_mask.extents[0] = 2; }, use_block_mask},
      {"BlockMaskAlignment", [](P& p, O&) { shift(p.mask.block_mask, 1); }, use_block_mask},
      {"ElementMaskStride", [](P& p, O&) { p.mask.element_mask.strides[2] = 16; }, use_element_mask},
      {"ElementMaskAlignment", [](P& p, O&) { shift(p.mask.element_mask, 3); }, use_element_mask},
      {"Backend", [](P&, O& o) { o.backend = Backend::automatic; }},
      {"NumThreads", [](P&, O& o) { o.num_threads = 2; }},
      {"NoTuning", [](P&, O& o) { o.no_tuning = true; }},
  };
}

class ForwardPlanKey : public ::testing::TestWithParam<ForwardChange> {};

TEST_P(ForwardPlanKey, ChangesWith) {
  AttentionForward base = fake_forward(0x10000000);
  RunOptions base_options = cpu_options();
  if (GetParam().setup) GetParam().setup(base, base_options);
  AttentionForward changed = base;
  RunOptions changed_options = base_options;
  GetParam().apply(changed, changed_options);
  EXPECT_FALSE(detail::attention_forward_key(base, base_options) ==
               detail::attention_forward_key(changed, changed_options));
}

INSTANTIATE_TEST_SUITE_P(PlanKey, ForwardPlanKey, ::testing::ValuesIn(forward_changes()),
                         [](const ::testing::TestParamInfo<ForwardChange>& info) { return info.param.name; });

std::vector<BackwardChange> backward_changes() {
  using P = AttentionBackward;
  using O = RunOptions;
  return {
      {"GradQPointerAlignment", [](P& p, O&) { shift(p.grad_q, 4); }},
      {"GradOutStride", [](P& p, O&) { p.grad_out.strides[0] += 64; }},
      {"GradKDtype", [](P& p, O&) { p.grad_k.dtype = DType::f16; }},
      {"LseAbsent", [](P& p, O&) { p.lse = TensorView{}; }},
      {"Deterministic", [](P& p, O&) { p.deterministic = true; }},
      {"KvSplits", [](P& p, O&) { p.kv_splits = 2; }},
      {"SplitWorkspaceLimit", [](P& p, O&) { p.split_workspace_limit = 0; }},
      {"Scale", [](P& p, O&) { p.scale = 0.5; }},
      {"MaskKind", [](P& p, O&) { p.mask = AttentionMask{}; }},
      {"NoTuning", [](P&, O& o) { o.no_tuning = true; }},
  };
}

class BackwardPlanKey : public ::testing::TestWithParam<BackwardChange> {};

TEST_P(BackwardPlanKey, ChangesWith) {
  AttentionBackward base = fake_backward(0x10000000);
  RunOptions base_options = cpu_options();
  if (GetParam().setup) GetParam().setup(base, base_options);
  AttentionBackward changed = base;
  RunOptions changed_options = base_options;
  GetParam().apply(changed, changed_options);
  EXPECT_FALSE(detail::attention_backward_key(base, base_options) ==
               detail::attention_backward_key(changed, changed_options));
}

INSTANTIATE_TEST_SUITE_P(PlanKey, BackwardPlanKey, ::testing::ValuesIn(backward_changes()),
                         [](const ::testing::TestParamInfo<BackwardChange>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------------------
// The plan cache

using AttentionPlanCache = PlanTest;

TEST_F(AttentionPlanCache, ARepeatedCallShapeWithOtherDataPointersGetsTheSamePlanObject) {
  const AttentionTensors a(causal_case(1));
  const AttentionTensors b(causal_case(2));
  ASSERT_TRUE(same_alignment(a, b)) << "test precondition";
  const auto first = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  EXPECT_EQ(detail::attention_forward_plan(b.forward_problem(), cpu_options()).get(), first.get());
  const auto first_backward = detail::attention_backward_plan(a.backward_problem(), cpu_options());
  EXPECT_EQ(detail::attention_backward_plan(b.backward_problem(), cpu_options()).get(), first_backward.get());
}

TEST_F(AttentionPlanCache, AnotherAlignmentGetsAnotherPlan) {
  const AttentionTensors a(causal_case(1));
  HostTensor wide = HostTensor::contiguous(DType::f32, {1 + 1 * 13 * 2 * 8});
  AttentionForward shifted = a.forward_problem();
  shifted.out.data = static_cast<float*>(wide.view.data) + 1;
  const auto first = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  EXPECT_NE(detail::attention_forward_plan(shifted, cpu_options()).get(), first.get());
}

TEST_F(AttentionPlanCache, ChangingTheTunerSettingsMakesANewPlan) {
  const AttentionTensors a(causal_case(1));
  const auto first = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  configure_tuner(tuner_settings());  // the same settings again: still a generation bump
  const auto second = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(detail::attention_forward_plan(a.forward_problem(), cpu_options()).get(), second.get());
}

TEST_F(AttentionPlanCache, ResettingTheTunersMakesANewPlan) {
  const AttentionTensors a(causal_case(1));
  const auto first = detail::attention_backward_plan(a.backward_problem(), cpu_options());
  tune::reset_process_tuners();
  EXPECT_NE(detail::attention_backward_plan(a.backward_problem(), cpu_options()).get(), first.get());
}

TEST_F(AttentionPlanCache, ClearingTheAttentionPlansMakesANewPlan) {
  const AttentionTensors a(causal_case(1));
  const auto first = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  const auto first_backward = detail::attention_backward_plan(a.backward_problem(), cpu_options());
  detail::clear_attention_plans();
  EXPECT_NE(detail::attention_forward_plan(a.forward_problem(), cpu_options()).get(), first.get());
  EXPECT_NE(detail::attention_backward_plan(a.backward_problem(), cpu_options()).get(), first_backward.get());
}

TEST_F(AttentionPlanCache, APlanHeldAcrossASettingsChangeStillRuns) {
  AttentionTensors a(causal_case(1));
  const auto held = detail::attention_forward_plan(a.forward_problem(), cpu_options());
  configure_tuner(tuner_settings());
  detail::clear_attention_plans();
  test::poison_nan(a.out.view);
  held->run(a.forward_problem(), cpu_options());
  a.run_reference_forward();
  EXPECT_LE(test::relative_l2(a.out.view, a.ref_out.view), 1e-5);
}

// ---------------------------------------------------------------------------------------------------------
// Errors through the plan

struct InvalidForward {
  const char* name;
  std::function<AttentionForward(const AttentionTensors&, HostTensor&)> make;
};

void PrintTo(const InvalidForward& c, std::ostream* os) { *os << c.name; }

std::vector<InvalidForward> invalid_forwards() {
  return {
      {"HeadDimMismatch",
       [](const AttentionTensors& t, HostTensor& scratch) {
         scratch = HostTensor::contiguous(DType::f32, {1, 13, 1, 10});
         AttentionForward p = t.forward_problem();
         p.k = scratch.view;
         return p;
       }},
      {"LseDtype",
       [](const AttentionTensors& t, HostTensor&) {
         AttentionForward p = t.forward_problem();
         p.lse.dtype = DType::f16;
         return p;
       }},
      {"NeighborhoodLargerThanTheTokens",
       [](const AttentionTensors& t, HostTensor&) {
         AttentionForward p = t.forward_problem();
         p.mask = neighborhood_mask({15});
         return p;
       }},
      {"BlockMaskShape",
       [](const AttentionTensors& t, HostTensor& scratch) {
         scratch = HostTensor::contiguous(DType::boolean, {1, 1, 3, 3});
         AttentionForward p = t.forward_problem();
         p.mask = block_sparse_mask(scratch.view, 8, 8);  // ceil(13 / 8) = 2 blocks per side
         return p;
       }},
      {"OutHeadDim",
       [](const AttentionTensors& t, HostTensor&) {
         AttentionForward p = t.forward_problem();
         p.out.extents[3] = 9;
         return p;
       }},
  };
}

class PlanErrors : public PlanTest, public ::testing::WithParamInterface<InvalidForward> {};

// The message and status of an attnkit::Error thrown by f, or {ok, ""} when it returns.
std::pair<Status, std::string> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  return {Status::ok, ""};
}

TEST_P(PlanErrors, AnInvalidCallThrowsThroughThePlanWhatTheCallThrowsAndCachesNothing) {
  AttentionTensors t(causal_case(1));
  HostTensor scratch;
  const AttentionForward invalid = GetParam().make(t, scratch);
  const auto from_call = error_of([&] { attention_forward(invalid, cpu_options()); });
  ASSERT_NE(from_call.first, Status::ok);
  EXPECT_FALSE(from_call.second.empty());
  const auto from_plan = error_of([&] { detail::attention_forward_plan(invalid, cpu_options()); });
  EXPECT_EQ(from_plan.first, from_call.first);
  EXPECT_EQ(from_plan.second, from_call.second);
  const auto from_query = error_of([&] { attention_forward_workspace_size(invalid, cpu_options()); });
  EXPECT_EQ(from_query.first, from_call.first);
  EXPECT_EQ(from_query.second, from_call.second);
  // Asked again, it throws again: no plan was cached for the invalid key.
  EXPECT_EQ(error_of([&] { attention_forward(invalid, cpu_options()); }).second, from_call.second);
  // The corrected call runs.
  t.run_forward();
  t.run_reference_forward();
  EXPECT_LE(test::relative_l2(t.out.view, t.ref_out.view), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AttentionPlan, PlanErrors, ::testing::ValuesIn(invalid_forwards()),
                         [](const ::testing::TestParamInfo<InvalidForward>& info) { return info.param.name; });

using AttentionPlan = PlanTest;

TEST_F(AttentionPlan, AnInvalidBackwardThrowsThroughThePlanWhatTheCallThrows) {
  const AttentionTensors t(causal_case(1));
  AttentionBackward invalid = t.backward_problem();
  invalid.lse = TensorView{};  // the backward needs the forward's lse
  const auto from_call = error_of([&] { attention_backward(invalid, cpu_options()); });
  ASSERT_EQ(from_call.first, Status::invalid_argument);
  const auto from_plan = error_of([&] { detail::attention_backward_plan(invalid, cpu_options()); });
  EXPECT_EQ(from_plan.first, from_call.first);
  EXPECT_EQ(from_plan.second, from_call.second);
}

TEST_F(AttentionPlan, TheWorkspaceQueryAndThePlanAgreeAndAreZeroOnTheCpu) {
  const AttentionTensors t(causal_case(1));
  const auto forward = detail::attention_forward_plan(t.forward_problem(), cpu_options());
  EXPECT_EQ(attention_forward_workspace_size(t.forward_problem(), cpu_options()), forward->workspace_bytes());
  EXPECT_EQ(forward->workspace_bytes(), 0);
  const auto backward = detail::attention_backward_plan(t.backward_problem(), cpu_options());
  EXPECT_EQ(attention_backward_workspace_size(t.backward_problem(), cpu_options()), backward->workspace_bytes());
  EXPECT_EQ(backward->workspace_bytes(), 0);
}

TEST_F(AttentionPlan, TheConfigQueryReportsThePlansConfig) {
  const AttentionTensors t(causal_case(1));
  const TunedConfig forward = detail::attention_forward_plan(t.forward_problem(), cpu_options())->config();
  EXPECT_FALSE(forward.name.empty());
  EXPECT_EQ(attention_forward_config(t.forward_problem(), cpu_options()).name, forward.name);
  EXPECT_EQ(attention_forward_config(t.forward_problem(), cpu_options()).source, forward.source);
  const TunedConfig backward = detail::attention_backward_plan(t.backward_problem(), cpu_options())->config();
  EXPECT_FALSE(backward.name.empty());
  EXPECT_EQ(attention_backward_config(t.backward_problem(), cpu_options()).name, backward.name);
  EXPECT_EQ(attention_backward_config(t.backward_problem(), cpu_options()).source, backward.source);
}

// ---------------------------------------------------------------------------------------------------------
// A plan run on new tensors: the bits of a call on those tensors

struct RunCase {
  const char* name;
  AttentionCase spec;
  std::vector<int64_t> mask_extents;  // block and element masks: made per tensor set
};

void PrintTo(const RunCase& c, std::ostream* os) { *os << c.name; }

// Inputs and outputs of one case, with their own random values and mask.
struct TensorSet {
  HostTensor mask;
  std::unique_ptr<AttentionTensors> t;
};

TensorSet make_set(const RunCase& c, uint64_t seed) {
  TensorSet set;
  AttentionCase spec = c.spec;
  spec.seed = seed;
  if (!c.mask_extents.empty()) {
    set.mask = HostTensor::contiguous(DType::boolean, c.mask_extents);
    std::mt19937_64 rng(seed + 1000);
    test::fill_random_bool(set.mask.view, rng, 0.6);
    (spec.mask.kind == MaskKind::block ? spec.mask.block_mask : spec.mask.element_mask) = set.mask.view;
  }
  set.t = std::make_unique<AttentionTensors>(spec);
  return set;
}

std::vector<RunCase> run_cases() {
  std::vector<RunCase> cases;
  {
    RunCase c{"Dense", {}, {}};
    c.spec.batch = 2;
    c.spec.tokens = {11};
    c.spec.tokens_kv = {13};
    c.spec.heads_q = 4;
    c.spec.heads_kv = 2;
    c.spec.head_dim = 12;
    c.spec.head_dim_v = 20;
    c.spec.dtype = DType::f32;
    c.spec.scale = 0.3;
    c.spec.strided = true;
    cases.push_back(c);
  }
  {
    RunCase c{"CausalBottomRight", {}, {}};
    c.spec.batch = 1;
    c.spec.tokens = {13};
    c.spec.tokens_kv = {21};
    c.spec.heads_q = 3;
    c.spec.heads_kv = 1;
    c.spec.head_dim = 8;
    c.spec.dtype = DType::f32;
    c.spec.mask = causal_mask(CausalAlignment::bottom_right);
    cases.push_back(c);
  }
  {
    RunCase c{"Neighborhood2d", {}, {}};
    c.spec.batch = 1;
    c.spec.tokens = {7, 9};
    c.spec.heads_q = 2;
    c.spec.heads_kv = 2;
    c.spec.head_dim = 8;
    c.spec.dtype = DType::f32;
    c.spec.mask = neighborhood_mask({3, 5}, {2, 1}, {1, 2}, {false, true});
    c.spec.strided = true;
    cases.push_back(c);
  }
  {
    RunCase c{"BlockMask", {}, {1, 2, 5, 2}};
    c.spec.batch = 2;
    c.spec.tokens = {37};
    c.spec.tokens_kv = {29};
    c.spec.heads_q = 2;
    c.spec.heads_kv = 1;
    c.spec.head_dim = 16;
    c.spec.dtype = DType::f32;
    c.spec.mask.kind = MaskKind::block;
    c.spec.mask.block_q = 8;
    c.spec.mask.block_k = 16;
    cases.push_back(c);
  }
  {
    RunCase c{"ElementMask", {}, {1, 3, 19, 23}};
    c.spec.batch = 1;
    c.spec.tokens = {19};
    c.spec.tokens_kv = {23};
    c.spec.heads_q = 3;
    c.spec.heads_kv = 1;
    c.spec.head_dim = 8;
    c.spec.dtype = DType::f32;
    c.spec.mask.kind = MaskKind::element;
    cases.push_back(c);
  }
  return cases;
}

class PlanRuns : public PlanTest, public ::testing::WithParamInterface<RunCase> {};

TEST_P(PlanRuns, AForwardPlanRunOnNewTensorsGivesTheBitsOfACallOnThem) {
  const TensorSet a = make_set(GetParam(), 1);
  const TensorSet b = make_set(GetParam(), 2);
  ASSERT_TRUE(same_alignment(*a.t, *b.t)) << "test precondition";
  const auto plan = detail::attention_forward_plan(a.t->forward_problem(), cpu_options());
  test::poison_nan(b.t->out.view);
  test::poison_nan(b.t->lse.view);
  plan->run(b.t->forward_problem(), cpu_options());
  EXPECT_FALSE(test::any_nan(b.t->out.view)) << "every output element is written";
  EXPECT_FALSE(test::any_nan(b.t->lse.view)) << "every lse element is written";
  const std::vector<double> out = test::to_doubles(b.t->out.view);
  const std::vector<double> lse = test::to_doubles(b.t->lse.view);
  // A call on b's tensors with a plan made for them.
  detail::clear_attention_plans();
  b.t->run_forward();
  EXPECT_EQ(out, test::to_doubles(b.t->out.view));
  EXPECT_EQ(lse, test::to_doubles(b.t->lse.view));
  b.t->run_reference_forward();
  EXPECT_LE(test::relative_l2(b.t->out.view, b.t->ref_out.view), 1e-5);
}

TEST_P(PlanRuns, ABackwardPlanRunOnNewTensorsGivesTheBitsOfACallOnThem) {
  const TensorSet a = make_set(GetParam(), 1);
  const TensorSet b = make_set(GetParam(), 2);
  ASSERT_TRUE(same_alignment(*a.t, *b.t)) << "test precondition";
  b.t->run_forward();
  const auto plan = detail::attention_backward_plan(a.t->backward_problem(), cpu_options());
  for (const HostTensor* grad : {&b.t->grad_q, &b.t->grad_k, &b.t->grad_v}) test::poison_nan(grad->view);
  plan->run(b.t->backward_problem(), cpu_options());
  std::vector<std::vector<double>> grads;
  for (const HostTensor* grad : {&b.t->grad_q, &b.t->grad_k, &b.t->grad_v}) {
    EXPECT_FALSE(test::any_nan(grad->view)) << "every gradient element is written";
    grads.push_back(test::to_doubles(grad->view));
  }
  detail::clear_attention_plans();
  b.t->run_backward();
  EXPECT_EQ(grads[0], test::to_doubles(b.t->grad_q.view));
  EXPECT_EQ(grads[1], test::to_doubles(b.t->grad_k.view));
  EXPECT_EQ(grads[2], test::to_doubles(b.t->grad_v.view));
  b.t->run_reference_backward();
  EXPECT_LE(test::relative_l2(b.t->grad_q.view, b.t->ref_grad_q.view), 1e-4);
  EXPECT_LE(test::relative_l2(b.t->grad_k.view, b.t->ref_grad_k.view), 1e-4);
  EXPECT_LE(test::relative_l2(b.t->grad_v.view, b.t->ref_grad_v.view), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(AttentionPlan, PlanRuns, ::testing::ValuesIn(run_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------------------
// RunOptions::no_tuning with the tuner in mode on

using PlanNoTuning = PlanTest;

bool holds_a_cache_file(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") return true;
  }
  return false;
}

TEST_F(PlanNoTuning, ACallWithNoTuningRunsTheDefaultWithoutTimingInModeOn) {
  TempDir dir;
  tune_into(dir.str());
  AttentionTensors t(causal_case(1));
  RunOptions options = cpu_options();
  options.no_tuning = true;
  EXPECT_EQ(attention_forward_config(t.forward_problem(), options).source, "default");
  attention_forward(t.forward_problem(), options);
  EXPECT_EQ(attention_backward_config(t.backward_problem(), options).source, "default");
  attention_backward(t.backward_problem(), options);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_FALSE(test::any_nan(t.grad_q.view));
}

TEST_F(PlanNoTuning, TheSameCallWithoutNoTuningTunes) {
  TempDir dir;
  tune_into(dir.str());
  const AttentionTensors t(causal_case(1));
  EXPECT_EQ(attention_forward_config(t.forward_problem(), cpu_options()).source, "tuned");
  EXPECT_TRUE(holds_a_cache_file(dir.path()));
}

TEST_F(PlanNoTuning, ACallWithNoTuningRunsAWinnerTunedBefore) {
  TempDir dir;
  tune_into(dir.str());
  const AttentionTensors t(causal_case(1));
  const TunedConfig tuned = attention_forward_config(t.forward_problem(), cpu_options());
  ASSERT_EQ(tuned.source, "tuned");
  RunOptions options = cpu_options();
  options.no_tuning = true;
  const TunedConfig untimed = attention_forward_config(t.forward_problem(), options);
  EXPECT_EQ(untimed.source, "cache");
  EXPECT_EQ(untimed.name, tuned.name);
}

// A winner learnt after a no_tuning plan was made reaches that call shape too (learning a winner
// invalidates the cached plans), as RunOptions::no_tuning says: cached winners or the default.
TEST_F(PlanNoTuning, ACallWithNoTuningRunsAWinnerTunedAfterItsFirstCall) {
  TempDir dir;
  tune_into(dir.str());
  const AttentionTensors t(causal_case(1));
  RunOptions options = cpu_options();
  options.no_tuning = true;
  ASSERT_EQ(attention_forward_config(t.forward_problem(), options).source, "default");
  const TunedConfig tuned = attention_forward_config(t.forward_problem(), cpu_options());
  ASSERT_EQ(tuned.source, "tuned");
  const TunedConfig untimed = attention_forward_config(t.forward_problem(), options);
  EXPECT_EQ(untimed.source, "cache");
  EXPECT_EQ(untimed.name, tuned.name);
}

// ---------------------------------------------------------------------------------------------------------
// The C ABI's plans, called as a C caller does

void set_c_mask(attnkit_attention_mask& c, const AttentionMask& mask) {
  c.kind = static_cast<int32_t>(mask.kind);
  c.causal_alignment = static_cast<int32_t>(mask.causal_alignment);
  c.dims = mask.dims;
  for (int d = 0; d < ATTNKIT_MAX_TOKEN_DIMS; ++d) {
    const NeighborhoodDim& dim = mask.neighborhood[static_cast<size_t>(d)];
    c.neighborhood[d].kernel_size = dim.kernel_size;
    c.neighborhood[d].dilation = dim.dilation;
    c.neighborhood[d].stride = dim.stride;
    c.neighborhood[d].causal = dim.causal ? 1 : 0;
  }
  c.block_mask = capi::to_c_tensor(mask.block_mask);
  c.block_q = mask.block_q;
  c.block_k = mask.block_k;
  c.element_mask = capi::to_c_tensor(mask.element_mask);
  c.rpb = capi::to_c_tensor(mask.rpb);
}

attnkit_attention_forward_args c_forward_args(const AttentionForward& p) {
  attnkit_attention_forward_args args;
  attnkit_attention_forward_args_init(&args);
  args.q = capi::to_c_tensor(p.q);
  args.k = capi::to_c_tensor(p.k);
  args.v = capi::to_c_tensor(p.v);
  args.out = capi::to_c_tensor(p.out);
  args.lse = capi::to_c_tensor(p.lse);
  if (p.scale) {
    args.has_scale = 1;
    args.scale = *p.scale;
  }
  set_c_mask(args.mask, p.mask);
  return args;
}

attnkit_attention_backward_args c_backward_args(const AttentionBackward& p) {
  attnkit_attention_backward_args args;
  attnkit_attention_backward_args_init(&args);
  args.q = capi::to_c_tensor(p.q);
  args.k = capi::to_c_tensor(p.k);
  args.v = capi::to_c_tensor(p.v);
  args.out = capi::to_c_tensor(p.out);
  args.lse = capi::to_c_tensor(p.lse);
  args.grad_out = capi::to_c_tensor(p.grad_out);
  args.grad_q = capi::to_c_tensor(p.grad_q);
  args.grad_k = capi::to_c_tensor(p.grad_k);
  args.grad_v = capi::to_c_tensor(p.grad_v);
  if (p.scale) {
    args.has_scale = 1;
    args.scale = *p.scale;
  }
  args.deterministic = p.deterministic ? 1 : 0;
  set_c_mask(args.mask, p.mask);
  args.grad_rpb = capi::to_c_tensor(p.grad_rpb);
  return args;
}

// attnkit_plan_run's data[]: the tensor fields of the args struct in declaration order.
std::vector<void*> forward_data(const AttentionForward& p) {
  return {p.q.data,       p.k.data, p.v.data, p.out.data, p.lse.data, p.mask.block_mask.data, p.mask.element_mask.data,
          p.mask.rpb.data};
}

std::vector<void*> backward_data(const AttentionBackward& p) {
  return {p.q.data,
          p.k.data,
          p.v.data,
          p.out.data,
          p.lse.data,
          p.grad_out.data,
          p.grad_q.data,
          p.grad_k.data,
          p.grad_v.data,
          p.mask.block_mask.data,
          p.mask.element_mask.data,
          p.mask.rpb.data,
          p.grad_rpb.data};
}

PlanHandle forward_plan(const AttentionForward& p, int32_t flags = 0) {
  const attnkit_attention_forward_args args = c_forward_args(p);
  const attnkit_run_options options = c_cpu_options();
  attnkit_plan* plan = nullptr;
  const attnkit_status status = attnkit_attention_forward_plan(&args, &options, flags, &plan);
  EXPECT_EQ(status, ATTNKIT_OK) << attnkit_last_error();
  return PlanHandle(plan);
}

PlanHandle backward_plan(const AttentionBackward& p, int32_t flags = 0) {
  const attnkit_attention_backward_args args = c_backward_args(p);
  const attnkit_run_options options = c_cpu_options();
  attnkit_plan* plan = nullptr;
  const attnkit_status status = attnkit_attention_backward_plan(&args, &options, flags, &plan);
  EXPECT_EQ(status, ATTNKIT_OK) << attnkit_last_error();
  return PlanHandle(plan);
}

using CApiPlan = PlanTest;

TEST_F(CApiPlan, AForwardPlanRunWithNewDataPointersGivesTheOperationsOutput) {
  const AttentionTensors a(causal_case(1));
  const AttentionTensors b(causal_case(2));
  ASSERT_TRUE(same_alignment(a, b)) << "test precondition";
  const PlanHandle plan = forward_plan(a.forward_problem());
  ASSERT_NE(plan, nullptr);
  int64_t bytes = -1;
  ASSERT_EQ(attnkit_plan_workspace_size(plan.get(), &bytes), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(bytes, 0);
  test::poison_nan(b.out.view);
  test::poison_nan(b.lse.view);
  ASSERT_EQ(run_plan(plan, forward_data(b.forward_problem())), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_FALSE(test::any_nan(b.out.view));
  const std::vector<double> out = test::to_doubles(b.out.view);
  const std::vector<double> lse = test::to_doubles(b.lse.view);
  test::poison_nan(b.out.view);
  test::poison_nan(b.lse.view);
  const attnkit_attention_forward_args args = c_forward_args(b.forward_problem());
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_attention_forward(&args, &options), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(out, test::to_doubles(b.out.view));
  EXPECT_EQ(lse, test::to_doubles(b.lse.view));
}

TEST_F(CApiPlan, ABackwardPlanRunWithNewDataPointersGivesTheOperationsGradients) {
  AttentionTensors a(causal_case(1));
  AttentionTensors b(causal_case(2));
  ASSERT_TRUE(same_alignment(a, b)) << "test precondition";
  b.run_forward();
  const PlanHandle plan = backward_plan(a.backward_problem());
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(run_plan(plan, backward_data(b.backward_problem())), ATTNKIT_OK) << attnkit_last_error();
  std::vector<std::vector<double>> grads;
  for (const HostTensor* grad : {&b.grad_q, &b.grad_k, &b.grad_v}) {
    EXPECT_FALSE(test::any_nan(grad->view));
    grads.push_back(test::to_doubles(grad->view));
    test::poison_nan(grad->view);
  }
  const attnkit_attention_backward_args args = c_backward_args(b.backward_problem());
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_attention_backward(&args, &options), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(grads[0], test::to_doubles(b.grad_q.view));
  EXPECT_EQ(grads[1], test::to_doubles(b.grad_k.view));
  EXPECT_EQ(grads[2], test::to_doubles(b.grad_v.view));
}

TEST_F(CApiPlan, ABlockMaskPlanRunsOnAnotherMaskOfItsShape) {
  const RunCase c = run_cases()[3];
  ASSERT_EQ(std::string(c.name), "BlockMask");
  const TensorSet a = make_set(c, 1);
  const TensorSet b = make_set(c, 2);
  ASSERT_TRUE(same_alignment(*a.t, *b.t) && same_alignment(a.mask.view, b.mask.view)) << "test precondition";
  const PlanHandle plan = forward_plan(a.t->forward_problem());
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(run_plan(plan, forward_data(b.t->forward_problem())), ATTNKIT_OK) << attnkit_last_error();
  b.t->run_reference_forward();
  EXPECT_LE(test::relative_l2(b.t->out.view, b.t->ref_out.view), 1e-5);
}

TEST_F(CApiPlan, AnInvalidCallShapeReturnsTheOperationsStatusAndMessage) {
  const AttentionTensors t(causal_case(1));
  attnkit_attention_forward_args args = c_forward_args(t.forward_problem());
  args.v.extents[3] = 5;  // Dv 5 where out has 8
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_attention_forward(&args, &options), ATTNKIT_INVALID_ARGUMENT);
  const std::string from_call = attnkit_last_error();
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_attention_forward_plan(&args, &options, 0, &plan), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_EQ(std::string(attnkit_last_error()), from_call);
}

TEST_F(CApiPlan, ACountOtherThanTheArgsTensorFieldsIsRejected) {
  const AttentionTensors t(causal_case(1));
  const PlanHandle plan = forward_plan(t.forward_problem());
  std::vector<void*> data = forward_data(t.forward_problem());
  data.pop_back();
  EXPECT_EQ(run_plan(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), AllOf(HasSubstr("count: 7"), HasSubstr("8")));
  EXPECT_TRUE(all_nan(t.out.view)) << "nothing written";
}

TEST_F(CApiPlan, NullWhereThePlanHasATensorIsRejectedNamingTheField) {
  const AttentionTensors t(causal_case(1));
  const PlanHandle plan = forward_plan(t.forward_problem());
  std::vector<void*> data = forward_data(t.forward_problem());
  data[4] = nullptr;
  EXPECT_EQ(run_plan(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), HasSubstr("data[4] (lse)"));
  EXPECT_TRUE(all_nan(t.out.view)) << "nothing written";
}

TEST_F(CApiPlan, ATensorWhereThePlanHadNoneIsRejectedNamingTheField) {
  const AttentionTensors t(causal_case(1));
  AttentionForward without_lse = t.forward_problem();
  without_lse.lse = TensorView{};
  const PlanHandle plan = forward_plan(without_lse);
  EXPECT_EQ(run_plan(plan, forward_data(t.forward_problem())), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), HasSubstr("data[4] (lse)"));
}

TEST_F(CApiPlan, APointerOfAnotherAlignmentIsRejectedNamingTheField) {
  const AttentionTensors t(causal_case(1));
  const PlanHandle plan = forward_plan(t.forward_problem());
  HostTensor wide = HostTensor::contiguous(DType::f32, {1 + 1 * 13 * 2 * 8});
  std::vector<void*> data = forward_data(t.forward_problem());
  data[3] = static_cast<float*>(wide.view.data) + 1;
  EXPECT_EQ(run_plan(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), AllOf(HasSubstr("data[3] (out)"), HasSubstr("mod 16")));
}

TEST_F(CApiPlan, BackwardDataAreNamedInTheArgsStructsOrder) {
  AttentionTensors t(causal_case(1));
  t.run_forward();
  const PlanHandle plan = backward_plan(t.backward_problem());
  std::vector<void*> data = backward_data(t.backward_problem());
  data[9] = t.q.view.data;
  EXPECT_EQ(run_plan(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), HasSubstr("data[9] (mask.block_mask)"));
  data = backward_data(t.backward_problem());
  data[7] = nullptr;
  EXPECT_EQ(run_plan(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(attnkit_last_error(), HasSubstr("data[7] (grad_k)"));
}

TEST_F(CApiPlan, FlagsOtherThanNoTuningAreRejected) {
  const AttentionTensors t(causal_case(1));
  const attnkit_attention_forward_args args = c_forward_args(t.forward_problem());
  const attnkit_run_options options = c_cpu_options();
  for (const int32_t flags : {2, 3, -1}) {
    attnkit_plan* plan = nullptr;
    EXPECT_EQ(attnkit_attention_forward_plan(&args, &options, flags, &plan), ATTNKIT_INVALID_ARGUMENT) << flags;
    EXPECT_EQ(plan, nullptr);
    EXPECT_THAT(attnkit_last_error(), HasSubstr("flags"));
  }
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_attention_forward_plan(&args, &options, ATTNKIT_PLAN_NO_TUNING, &plan), ATTNKIT_OK);
  attnkit_plan_destroy(plan);
}

TEST_F(CApiPlan, AHandleKeepsWorkingAfterTheTunerSettingsChangeAndFollowsThem) {
  TempDir dir;
  AttentionTensors t(causal_case(1));
  const PlanHandle plan = forward_plan(t.forward_problem());
  ASSERT_EQ(run_plan(plan, forward_data(t.forward_problem())), ATTNKIT_OK) << attnkit_last_error();
  tune_into(dir.str());
  test::poison_nan(t.out.view);
  ASSERT_EQ(run_plan(plan, forward_data(t.forward_problem())), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_TRUE(holds_a_cache_file(dir.path())) << "the run re-planned under tuning on, and tuned";
  t.run_reference_forward();
  EXPECT_LE(test::relative_l2(t.out.view, t.ref_out.view), 1e-5);
}

TEST_F(CApiPlan, TheNoTuningFlagNeverTimes) {
  TempDir dir;
  tune_into(dir.str());
  const AttentionTensors t(causal_case(1));
  const PlanHandle plan = forward_plan(t.forward_problem(), ATTNKIT_PLAN_NO_TUNING);
  ASSERT_EQ(run_plan(plan, forward_data(t.forward_problem())), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_FALSE(test::any_nan(t.out.view));
}

TEST_F(CApiPlan, NullPlansAreRejectedAndDestroyingNullIsHarmless) {
  int64_t bytes = 0;
  EXPECT_EQ(attnkit_plan_workspace_size(nullptr, &bytes), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(attnkit_plan_run(nullptr, nullptr, 0, nullptr, nullptr, 0), ATTNKIT_INVALID_ARGUMENT);
  attnkit_plan_destroy(nullptr);
}

}  // namespace
}  // namespace attnkit
