// The C ABI's retention plans (attnkit_retention_forward_plan, attnkit_retention_backward_plan, run through
// attnkit_plan_run): a plan made from one call shape and run on new tensors of that shape gives the bits the operation
// gives on them; the plan keeps its own copy of gamma; the data[] array follows the args struct's tensor fields and a
// run is checked against the plan's shape. CPU tensors: runs in every build.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"
#include "capi/c_api_convert.hpp"
#include "test_capi_plan_support.hpp"
#include "test_support.hpp"

namespace attnkit {
namespace {

using test::c_cpu_options;
using test::HostTensor;
using test::PlanHandle;
using test::run_plan;

// One retention call's tensors: q, k [B, T, H, Dk], v [B, T, H, Dv], the states [B, H, Dk, Dv] (fp32), and for the
// backward the incoming gradients and the outputs; random inputs from `seed`.
struct RetentionTensors {
  static constexpr int64_t kB = 2, kT = 70, kH = 3, kDk = 16, kDv = 8;
  HostTensor q = HostTensor::padded(DType::f32, {kB, kT, kH, kDk});
  HostTensor k = HostTensor::padded(DType::f32, {kB, kT, kH, kDk});
  HostTensor v = HostTensor::padded(DType::f32, {kB, kT, kH, kDv});
  HostTensor out = HostTensor::padded(DType::f32, {kB, kT, kH, kDv});
  HostTensor initial_state = HostTensor::contiguous(DType::f32, {kB, kH, kDk, kDv});
  HostTensor final_state = HostTensor::contiguous(DType::f32, {kB, kH, kDk, kDv});
  HostTensor grad_out = HostTensor::padded(DType::f32, {kB, kT, kH, kDv});
  HostTensor grad_final_state = HostTensor::contiguous(DType::f32, {kB, kH, kDk, kDv});
  HostTensor grad_q = HostTensor::padded(DType::f32, {kB, kT, kH, kDk});
  HostTensor grad_k = HostTensor::padded(DType::f32, {kB, kT, kH, kDk});
  HostTensor grad_v = HostTensor::padded(DType::f32, {kB, kT, kH, kDv});
  HostTensor grad_initial_state = HostTensor::contiguous(DType::f32, {kB, kH, kDk, kDv});

  explicit RetentionTensors(uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (HostTensor* t : {&q, &k, &v, &initial_state, &grad_out, &grad_final_state}) test::fill_random(t->view, rng);
  }
  std::vector<HostTensor*> outputs() { return {&out, &final_state, &grad_q, &grad_k, &grad_v, &grad_initial_state}; }
};

// Per-head gamma and a custom scale (both belong to the plan), chunkwise with chunks of 16.
template <class Args>
void set_common(Args& args, const double* gamma) {
  args.gamma = gamma;
  args.gamma_count = RetentionTensors::kH;
  args.mode = ATTNKIT_RETENTION_CHUNKWISE;
  args.chunk_size = 16;
  args.has_scale = 1;
  args.scale = 0.3;
}

attnkit_retention_forward_args forward_args(const RetentionTensors& t, const double* gamma) {
  attnkit_retention_forward_args args;
  attnkit_retention_forward_args_init(&args);
  args.q = capi::to_c_tensor(t.q.view);
  args.k = capi::to_c_tensor(t.k.view);
  args.v = capi::to_c_tensor(t.v.view);
  args.out = capi::to_c_tensor(t.out.view);
  args.initial_state = capi::to_c_tensor(t.initial_state.view);
  args.final_state = capi::to_c_tensor(t.final_state.view);
  set_common(args, gamma);
  return args;
}

attnkit_retention_backward_args backward_args(const RetentionTensors& t, const double* gamma) {
  attnkit_retention_backward_args args;
  attnkit_retention_backward_args_init(&args);
  args.q = capi::to_c_tensor(t.q.view);
  args.k = capi::to_c_tensor(t.k.view);
  args.v = capi::to_c_tensor(t.v.view);
  args.grad_out = capi::to_c_tensor(t.grad_out.view);
  args.initial_state = capi::to_c_tensor(t.initial_state.view);
  args.grad_final_state = capi::to_c_tensor(t.grad_final_state.view);
  args.grad_q = capi::to_c_tensor(t.grad_q.view);
  args.grad_k = capi::to_c_tensor(t.grad_k.view);
  args.grad_v = capi::to_c_tensor(t.grad_v.view);
  args.grad_initial_state = capi::to_c_tensor(t.grad_initial_state.view);
  set_common(args, gamma);
  return args;
}

// attnkit_plan_run's data[]: the args structs' tensor fields in declaration order.
std::vector<void*> forward_data(const RetentionTensors& t) {
  return {t.q.view.data,           t.k.view.data, t.v.view.data, t.out.view.data, t.initial_state.view.data,
          t.final_state.view.data, nullptr};
}

std::vector<void*> backward_data(const RetentionTensors& t) {
  return {t.q.view.data,
          t.k.view.data,
          t.v.view.data,
          t.grad_out.view.data,
          t.initial_state.view.data,
          t.grad_final_state.view.data,
          t.grad_q.view.data,
          t.grad_k.view.data,
          t.grad_v.view.data,
          t.grad_initial_state.view.data,
          nullptr};
}

PlanHandle forward_plan(const RetentionTensors& t, const double* gamma) {
  const attnkit_retention_forward_args args = forward_args(t, gamma);
  const attnkit_run_options options = c_cpu_options();
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_retention_forward_plan(&args, &options, 0, &plan), ATTNKIT_OK) << attnkit_last_error();
  return PlanHandle(plan);
}

PlanHandle backward_plan(const RetentionTensors& t, const double* gamma) {
  const attnkit_retention_backward_args args = backward_args(t, gamma);
  const attnkit_run_options options = c_cpu_options();
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_retention_backward_plan(&args, &options, 0, &plan), ATTNKIT_OK) << attnkit_last_error();
  return PlanHandle(plan);
}

bool same_alignment(const HostTensor& a, const HostTensor& b) {
  return reinterpret_cast<uintptr_t>(a.view.data) % 16 == reinterpret_cast<uintptr_t>(b.view.data) % 16;
}

bool same_alignment(RetentionTensors& a, RetentionTensors& b) {
  const std::vector<const HostTensor*> x = {&a.q, &a.k, &a.v, &a.initial_state, &a.grad_out, &a.grad_final_state};
  const std::vector<const HostTensor*> y = {&b.q, &b.k, &b.v, &b.initial_state, &b.grad_out, &b.grad_final_state};
  for (size_t i = 0; i < x.size(); ++i) {
    if (!same_alignment(*x[i], *y[i])) return false;
  }
  const std::vector<HostTensor*> xo = a.outputs(), yo = b.outputs();
  for (size_t i = 0; i < xo.size(); ++i) {
    if (!same_alignment(*xo[i], *yo[i])) return false;
  }
  return true;
}

TEST(CApiRetentionPlan, AForwardPlanRunOnNewTensorsGivesTheOperationsOutputAndState) {
  const double gamma[RetentionTensors::kH] = {0.5, 0.9, 0.99};
  RetentionTensors a(1), b(2);
  ASSERT_TRUE(same_alignment(a, b)) << "test precondition";
  const PlanHandle plan = forward_plan(a, gamma);
  ASSERT_NE(plan, nullptr);
  int64_t bytes = -1;
  ASSERT_EQ(attnkit_plan_workspace_size(plan.get(), &bytes), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(bytes, 0);
  test::poison_nan(b.out.view);
  test::poison_nan(b.final_state.view);
  ASSERT_EQ(run_plan(plan, forward_data(b)), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_FALSE(test::any_nan(b.out.view));
  EXPECT_FALSE(test::any_nan(b.final_state.view));
  const std::vector<double> out = test::to_doubles(b.out.view);
  const std::vector<double> state = test::to_doubles(b.final_state.view);
  test::poison_nan(b.out.view);
  test::poison_nan(b.final_state.view);
  const attnkit_retention_forward_args args = forward_args(b, gamma);
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_retention_forward(&args, &options), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(out, test::to_doubles(b.out.view));
  EXPECT_EQ(state, test::to_doubles(b.final_state.view));
}

TEST(CApiRetentionPlan, ABackwardPlanRunOnNewTensorsGivesTheOperationsGradients) {
  const double gamma[RetentionTensors::kH] = {0.5, 0.9, 0.99};
  RetentionTensors a(3), b(4);
  ASSERT_TRUE(same_alignment(a, b)) << "test precondition";
  const PlanHandle plan = backward_plan(a, gamma);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(run_plan(plan, backward_data(b)), ATTNKIT_OK) << attnkit_last_error();
  std::vector<std::vector<double>> grads;
  for (HostTensor* grad : {&b.grad_q, &b.grad_k, &b.grad_v, &b.grad_initial_state}) {
    EXPECT_FALSE(test::any_nan(grad->view));
    grads.push_back(test::to_doubles(grad->view));
    test::poison_nan(grad->view);
  }
  const attnkit_retention_backward_args args = backward_args(b, gamma);
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_retention_backward(&args, &options), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(grads[0], test::to_doubles(b.grad_q.view));
  EXPECT_EQ(grads[1], test::to_doubles(b.grad_k.view));
  EXPECT_EQ(grads[2], test::to_doubles(b.grad_v.view));
  EXPECT_EQ(grads[3], test::to_doubles(b.grad_initial_state.view));
}

TEST(CApiRetentionPlan, ThePlanKeepsItsOwnGamma) {
  double gamma[RetentionTensors::kH] = {0.5, 0.9, 0.99};
  RetentionTensors t(5);
  const PlanHandle plan = forward_plan(t, gamma);
  ASSERT_NE(plan, nullptr);
  const attnkit_retention_forward_args args = forward_args(t, gamma);
  const attnkit_run_options options = c_cpu_options();
  ASSERT_EQ(attnkit_retention_forward(&args, &options), ATTNKIT_OK) << attnkit_last_error();
  const std::vector<double> expected = test::to_doubles(t.out.view);
  gamma[0] = gamma[1] = gamma[2] = 0.1;  // the caller's array changes after the plan was made
  test::poison_nan(t.out.view);
  ASSERT_EQ(run_plan(plan, forward_data(t)), ATTNKIT_OK) << attnkit_last_error();
  EXPECT_EQ(test::to_doubles(t.out.view), expected);
}

TEST(CApiRetentionPlan, RunsAreCheckedAgainstThePlansTensorFields) {
  const double gamma[RetentionTensors::kH] = {0.5, 0.9, 0.99};
  RetentionTensors t(6);
  const PlanHandle forward = forward_plan(t, gamma);
  const PlanHandle backward = backward_plan(t, gamma);
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(backward, nullptr);
  std::vector<void*> data = forward_data(t);
  data.pop_back();
  EXPECT_EQ(run_plan(forward, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("allowed: 7"), std::string::npos) << attnkit_last_error();
  data = forward_data(t);
  data[5] = nullptr;  // final_state, which the plan was made with
  EXPECT_EQ(run_plan(forward, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("data[5] (final_state)"), std::string::npos) << attnkit_last_error();
  data = backward_data(t);
  data[9] = nullptr;  // grad_initial_state
  EXPECT_EQ(run_plan(backward, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("data[9] (grad_initial_state)"), std::string::npos)
      << attnkit_last_error();
  EXPECT_EQ(run_plan(backward, std::vector<void*>(7, nullptr)), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("allowed: 11"), std::string::npos) << attnkit_last_error();
}

TEST(CApiRetentionPlan, AnInvalidCallShapeReturnsTheOperationsStatusAndMessage) {
  RetentionTensors t(7);
  attnkit_retention_forward_args args = forward_args(t, nullptr);
  args.gamma_count = 0;
  args.chunk_size = 0;
  const attnkit_run_options options = c_cpu_options();
  attnkit_plan* plan = nullptr;
  const attnkit_status call = attnkit_retention_forward(&args, &options);
  const std::string call_message = attnkit_last_error();
  EXPECT_EQ(attnkit_retention_forward_plan(&args, &options, 0, &plan), call);
  EXPECT_EQ(std::string(attnkit_last_error()), call_message);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(call, ATTNKIT_OK);
}

}  // namespace
}  // namespace attnkit
