// Empty tensors through the C ABI: an attnkit_tensor with data == NULL and an extent 0 is a present tensor
// with no elements, as in the C++ API (core/zero_size.hpp), in every entry point that takes tensors (the
// operations, the workspace queries, the plan functions and attnkit_plan_run). NULL for a tensor that has
// elements is still an absent tensor, refused for a required argument with a message naming it; an absent
// optional tensor (rank 0) stays absent. The message of an out-of-range dtype lists only the dtypes the
// argument may have: BOOL for the masks, never for the float arguments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"
#include "capi/c_api_convert.hpp"
#include "test_capi_plan_support.hpp"
#include "test_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// A tensor with an extent 0 and a NULL data pointer.
HostTensor empty_tensor(DType dtype, const std::vector<int64_t>& extents) {
  HostTensor t = HostTensor::contiguous(dtype, extents);
  t.view.data = nullptr;
  return t;
}

// A tensor with elements and random values.
HostTensor random_tensor(DType dtype, const std::vector<int64_t>& extents, uint64_t seed) {
  HostTensor t = HostTensor::contiguous(dtype, extents);
  std::mt19937_64 rng(seed);
  fill_random(t.view, rng);
  return t;
}

// `extents` with an extent 0: a NULL empty tensor; otherwise random values (seed > 0) or NaN (seed 0).
HostTensor tensor(DType dtype, const std::vector<int64_t>& extents, uint64_t seed) {
  for (int64_t extent : extents) {
    if (extent == 0) {
      return empty_tensor(dtype, extents);
    }
  }
  return seed == 0 ? poisoned_tensor(dtype, extents) : random_tensor(dtype, extents, seed);
}

// Every element equals `value`; at least one element (the tests check outputs that must be written).
::testing::AssertionResult all_equal(const TensorView& view, double value) {
  const std::vector<double> values = to_doubles(view);
  if (values.empty()) {
    return ::testing::AssertionFailure() << "the view has no elements";
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != value) {
      return ::testing::AssertionFailure() << "element " << i << " is " << values[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::string last_error() { return attnkit_last_error(); }

// One attention call: q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv]; out, lse and the gradients
// poisoned; grad_out random. Tensors with an extent 0 have NULL data.
struct AttentionCall {
  HostTensor q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v;

  AttentionCall(const std::vector<int64_t>& q_shape, const std::vector<int64_t>& k_shape, int64_t head_dim_v) {
    std::vector<int64_t> v_shape = k_shape;
    v_shape.back() = head_dim_v;
    std::vector<int64_t> out_shape = q_shape;
    out_shape.back() = head_dim_v;
    const std::vector<int64_t> lse_shape(q_shape.begin(), q_shape.end() - 1);
    q = tensor(DType::f32, q_shape, 1);
    k = tensor(DType::f32, k_shape, 2);
    v = tensor(DType::f32, v_shape, 3);
    out = tensor(DType::f32, out_shape, 0);
    lse = tensor(DType::f32, lse_shape, 0);
    grad_out = tensor(DType::f32, out_shape, 4);
    grad_q = tensor(DType::f32, q_shape, 0);
    grad_k = tensor(DType::f32, k_shape, 0);
    grad_v = tensor(DType::f32, v_shape, 0);
  }

  attnkit_attention_forward_args forward_args() const {
    attnkit_attention_forward_args args;
    attnkit_attention_forward_args_init(&args);
    args.q = capi::to_c_tensor(q.view);
    args.k = capi::to_c_tensor(k.view);
    args.v = capi::to_c_tensor(v.view);
    args.out = capi::to_c_tensor(out.view);
    args.lse = capi::to_c_tensor(lse.view);
    return args;
  }

  // The backward of a call whose forward ran: out and lse hold its results.
  attnkit_attention_backward_args backward_args() const {
    attnkit_attention_backward_args args;
    attnkit_attention_backward_args_init(&args);
    args.q = capi::to_c_tensor(q.view);
    args.k = capi::to_c_tensor(k.view);
    args.v = capi::to_c_tensor(v.view);
    args.out = capi::to_c_tensor(out.view);
    args.lse = capi::to_c_tensor(lse.view);
    args.grad_out = capi::to_c_tensor(grad_out.view);
    args.grad_q = capi::to_c_tensor(grad_q.view);
    args.grad_k = capi::to_c_tensor(grad_k.view);
    args.grad_v = capi::to_c_tensor(grad_v.view);
    return args;
  }

  // attnkit_plan_run's data[]: the args structs' tensor fields in declaration order (no mask tensors).
  std::vector<void*> forward_data() const {
    return {q.view.data, k.view.data, v.view.data, out.view.data, lse.view.data, nullptr, nullptr, nullptr};
  }
  std::vector<void*> backward_data() const {
    return {q.view.data,      k.view.data,      v.view.data,      out.view.data, lse.view.data, grad_out.view.data,
            grad_q.view.data, grad_k.view.data, grad_v.view.data, nullptr,       nullptr,       nullptr,
            nullptr};
  }
};

using Plan = PlanHandle;

Plan forward_plan(const attnkit_attention_forward_args& args) {
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_attention_forward_plan(&args, nullptr, 0, &plan), ATTNKIT_OK) << last_error();
  return Plan(plan);
}

Plan backward_plan(const attnkit_attention_backward_args& args) {
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_attention_backward_plan(&args, nullptr, 0, &plan), ATTNKIT_OK) << last_error();
  return Plan(plan);
}

attnkit_status run(const Plan& plan, const std::vector<void*>& data) {
  return attnkit_plan_run(plan.get(), data.data(), static_cast<int32_t>(data.size()), nullptr, nullptr, 0);
}

int64_t plan_workspace(const Plan& plan) {
  int64_t bytes = -1;
  EXPECT_EQ(attnkit_plan_workspace_size(plan.get(), &bytes), ATTNKIT_OK) << last_error();
  return bytes;
}

// 16-byte aligned storage that a test hands over as the address of an empty tensor.
void* aligned_address() {
  alignas(64) static unsigned char storage[64];
  return storage;
}

// (q shape, k shape, Dv) of the zero-size attention calls: batch 0, no query token, no key token, no query
// head, head_dim 0 (q and k empty, computed by the backend) and value dim 0.
struct ZeroSizeShape {
  std::vector<int64_t> q, k;
  int64_t dv;
};
const std::vector<ZeroSizeShape>& zero_size_shapes() {
  static const std::vector<ZeroSizeShape> shapes{{{0, 5, 2, 8}, {0, 6, 2, 8}, 8}, {{2, 0, 2, 8}, {2, 6, 2, 8}, 8},
                                                 {{2, 5, 2, 8}, {2, 0, 2, 8}, 8}, {{2, 5, 0, 8}, {2, 6, 0, 8}, 8},
                                                 {{1, 3, 2, 0}, {1, 4, 2, 0}, 4}, {{1, 4, 2, 8}, {1, 6, 2, 8}, 0}};
  return shapes;
}

// "q [2, 5, 2, 8] k [2, 0, 2, 8] Dv 8", for failure messages.
std::string describe(const ZeroSizeShape& shape) {
  const auto extents = [](const std::vector<int64_t>& e) {
    return make_view(nullptr, DType::f32, static_cast<int32_t>(e.size()), e.data()).shape_string();
  };
  return "q " + extents(shape.q) + " k " + extents(shape.k) + " Dv " + std::to_string(shape.dv);
}

// --- operations -------------------------------------------------------------------------------------

TEST(CapiEmptyTensors, AttentionForwardTakesNullForEveryEmptyTensor) {
  for (const ZeroSizeShape& shape : zero_size_shapes()) {
    const AttentionCall call(shape.q, shape.k, shape.dv);
    const attnkit_attention_forward_args args = call.forward_args();
    int64_t bytes = -1;
    ASSERT_EQ(attnkit_attention_forward_workspace_size(&args, nullptr, &bytes), ATTNKIT_OK)
        << describe(shape) << ": " << last_error();
    EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << describe(shape) << ": " << last_error();
  }
}

TEST(CapiEmptyTensors, AttentionForwardWithNullKeysWritesZerosAndMinusInf) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 6);
  ASSERT_EQ(call.k.view.data, nullptr) << "test precondition";
  const attnkit_attention_forward_args args = call.forward_args();
  ASSERT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  EXPECT_TRUE(all_equal(call.lse.view, kMinusInf));
}

TEST(CapiEmptyTensors, AttentionBackwardTakesNullForEveryEmptyTensor) {
  for (const ZeroSizeShape& shape : zero_size_shapes()) {
    const AttentionCall call(shape.q, shape.k, shape.dv);
    const attnkit_attention_forward_args forward = call.forward_args();
    ASSERT_EQ(attnkit_attention_forward(&forward, nullptr), ATTNKIT_OK) << describe(shape) << ": " << last_error();
    const attnkit_attention_backward_args args = call.backward_args();
    int64_t bytes = -1;
    ASSERT_EQ(attnkit_attention_backward_workspace_size(&args, nullptr, &bytes), ATTNKIT_OK)
        << describe(shape) << ": " << last_error();
    EXPECT_EQ(attnkit_attention_backward(&args, nullptr), ATTNKIT_OK) << describe(shape) << ": " << last_error();
  }
}

TEST(CapiEmptyTensors, AttentionBackwardWithNullKeysGivesZeroQueryGradients) {
  const AttentionCall call({1, 5, 2, 4}, {1, 0, 2, 4}, 4);
  const attnkit_attention_forward_args forward = call.forward_args();
  ASSERT_EQ(attnkit_attention_forward(&forward, nullptr), ATTNKIT_OK) << last_error();
  const attnkit_attention_backward_args args = call.backward_args();
  ASSERT_EQ(attnkit_attention_backward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.grad_q.view, 0.0));
}

TEST(CapiEmptyTensors, AttentionBackwardWithNullQueriesGivesZeroKeyAndValueGradients) {
  const AttentionCall call({1, 0, 2, 4}, {1, 6, 2, 4}, 3);
  const attnkit_attention_backward_args args = call.backward_args();
  ASSERT_EQ(attnkit_attention_backward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.grad_k.view, 0.0));
  EXPECT_TRUE(all_equal(call.grad_v.view, 0.0));
}

TEST(CapiEmptyTensors, EmptyMaskTensorsMayBeNull) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);
  const HostTensor element_mask = empty_tensor(DType::boolean, {2, 1, 5, 0});
  attnkit_attention_forward_args args = call.forward_args();
  args.mask.kind = ATTNKIT_MASK_ELEMENT;
  args.mask.element_mask = capi::to_c_tensor(element_mask.view);
  ASSERT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));

  const HostTensor block_mask = empty_tensor(DType::boolean, {1, 1, 2, 0});
  args = call.forward_args();
  args.mask.kind = ATTNKIT_MASK_BLOCK;
  args.mask.block_mask = capi::to_c_tensor(block_mask.view);
  args.mask.block_q = 4;
  args.mask.block_k = 4;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << last_error();
}

TEST(CapiEmptyTensors, RetentionForwardAndBackwardTakeNullForEmptyTensors) {
  // Dk = 0: q, k and the states are empty; out = 0 and grad_v = 0.
  const std::vector<int64_t> empty_qk{2, 5, 3, 0};
  const std::vector<int64_t> values{2, 5, 3, 4};
  const HostTensor q = empty_tensor(DType::f32, empty_qk);
  const HostTensor k = empty_tensor(DType::f32, empty_qk);
  const HostTensor v = random_tensor(DType::f32, values, 5);
  const HostTensor out = poisoned_tensor(DType::f32, values);
  const HostTensor initial_state = empty_tensor(DType::f32, {2, 3, 0, 4});
  const HostTensor final_state = empty_tensor(DType::f32, {2, 3, 0, 4});
  for (int32_t mode : {ATTNKIT_RETENTION_PARALLEL, ATTNKIT_RETENTION_CHUNKWISE, ATTNKIT_RETENTION_RECURRENT}) {
    attnkit_retention_forward_args forward;
    attnkit_retention_forward_args_init(&forward);
    forward.q = capi::to_c_tensor(q.view);
    forward.k = capi::to_c_tensor(k.view);
    forward.v = capi::to_c_tensor(v.view);
    forward.out = capi::to_c_tensor(out.view);
    forward.initial_state = capi::to_c_tensor(initial_state.view);
    forward.final_state = capi::to_c_tensor(final_state.view);
    forward.mode = mode;
    forward.chunk_size = 4;
    ASSERT_EQ(attnkit_retention_forward(&forward, nullptr), ATTNKIT_OK) << "mode " << mode << ": " << last_error();
    EXPECT_TRUE(all_equal(out.view, 0.0)) << "mode " << mode;

    const HostTensor grad_out = random_tensor(DType::f32, values, 6);
    const HostTensor grad_q = empty_tensor(DType::f32, empty_qk);
    const HostTensor grad_k = empty_tensor(DType::f32, empty_qk);
    const HostTensor grad_v = poisoned_tensor(DType::f32, values);
    const HostTensor grad_initial_state = empty_tensor(DType::f32, {2, 3, 0, 4});
    attnkit_retention_backward_args backward;
    attnkit_retention_backward_args_init(&backward);
    backward.q = capi::to_c_tensor(q.view);
    backward.k = capi::to_c_tensor(k.view);
    backward.v = capi::to_c_tensor(v.view);
    backward.grad_out = capi::to_c_tensor(grad_out.view);
    backward.initial_state = capi::to_c_tensor(initial_state.view);
    backward.grad_final_state = capi::to_c_tensor(final_state.view);
    backward.grad_q = capi::to_c_tensor(grad_q.view);
    backward.grad_k = capi::to_c_tensor(grad_k.view);
    backward.grad_v = capi::to_c_tensor(grad_v.view);
    backward.grad_initial_state = capi::to_c_tensor(grad_initial_state.view);
    backward.mode = mode;
    backward.chunk_size = 4;
    ASSERT_EQ(attnkit_retention_backward(&backward, nullptr), ATTNKIT_OK) << "mode " << mode << ": " << last_error();
    EXPECT_TRUE(all_equal(grad_v.view, 0.0)) << "mode " << mode;
  }
}

TEST(CapiEmptyTensors, RetentionWithNoTokenPassesTheStateThroughNullInputs) {
  const HostTensor q = empty_tensor(DType::f32, {2, 0, 3, 4});
  const HostTensor v = empty_tensor(DType::f32, {2, 0, 3, 5});
  const HostTensor initial_state = random_tensor(DType::f32, {2, 3, 4, 5}, 7);
  const HostTensor final_state = poisoned_tensor(DType::f32, {2, 3, 4, 5});
  attnkit_retention_forward_args args;
  attnkit_retention_forward_args_init(&args);
  args.q = capi::to_c_tensor(q.view);
  args.k = capi::to_c_tensor(q.view);
  args.v = capi::to_c_tensor(v.view);
  args.out = capi::to_c_tensor(v.view);
  args.initial_state = capi::to_c_tensor(initial_state.view);
  args.final_state = capi::to_c_tensor(final_state.view);
  ASSERT_EQ(attnkit_retention_forward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_EQ(max_abs_difference(final_state.view, initial_state.view), 0.0);
}

TEST(CapiEmptyTensors, GemmTakesNullForEmptyOperandsAndResult) {
  // Batch 0: a and c empty, b broadcast.
  const HostTensor a = empty_tensor(DType::f32, {0, 4, 3});
  const HostTensor b = random_tensor(DType::f32, {1, 3, 5}, 8);
  const HostTensor c = empty_tensor(DType::f32, {0, 4, 5});
  attnkit_gemm_args args;
  attnkit_gemm_args_init(&args);
  args.a = capi::to_c_tensor(a.view);
  args.b = capi::to_c_tensor(b.view);
  args.c = capi::to_c_tensor(c.view);
  EXPECT_EQ(attnkit_gemm(&args, nullptr), ATTNKIT_OK) << last_error();

  // Inner dim 0: a and b empty, C = beta * C = 0.
  const HostTensor a0 = empty_tensor(DType::f32, {4, 0});
  const HostTensor b0 = empty_tensor(DType::f32, {0, 5});
  const HostTensor c0 = poisoned_tensor(DType::f32, {4, 5});
  args.a = capi::to_c_tensor(a0.view);
  args.b = capi::to_c_tensor(b0.view);
  args.c = capi::to_c_tensor(c0.view);
  ASSERT_EQ(attnkit_gemm(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(c0.view, 0.0));
}

// --- plans ------------------------------------------------------------------------------------------

TEST(CapiEmptyTensors, ForwardPlanTakesNullInCreateWorkspaceAndRun) {
  for (const ZeroSizeShape& shape : zero_size_shapes()) {
    const AttentionCall call(shape.q, shape.k, shape.dv);
    const Plan plan = forward_plan(call.forward_args());
    ASSERT_NE(plan, nullptr) << describe(shape);
    EXPECT_GE(plan_workspace(plan), 0) << describe(shape);
    EXPECT_EQ(run(plan, call.forward_data()), ATTNKIT_OK) << describe(shape) << ": " << last_error();
  }
}

TEST(CapiEmptyTensors, ForwardPlanRunOnNullKeysWritesZerosAndMinusInf) {
  const AttentionCall made({2, 5, 2, 8}, {2, 0, 2, 8}, 8);
  const Plan plan = forward_plan(made.forward_args());
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan_workspace(plan), 0);
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);  // new outputs, same shape
  ASSERT_EQ(run(plan, call.forward_data()), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  EXPECT_TRUE(all_equal(call.lse.view, kMinusInf));
}

TEST(CapiEmptyTensors, BackwardPlanTakesNullInCreateWorkspaceAndRun) {
  for (const ZeroSizeShape& shape : zero_size_shapes()) {
    const AttentionCall call(shape.q, shape.k, shape.dv);
    const attnkit_attention_forward_args forward = call.forward_args();
    ASSERT_EQ(attnkit_attention_forward(&forward, nullptr), ATTNKIT_OK) << describe(shape) << ": " << last_error();
    const Plan plan = backward_plan(call.backward_args());
    ASSERT_NE(plan, nullptr) << describe(shape);
    EXPECT_GE(plan_workspace(plan), 0) << describe(shape);
    EXPECT_EQ(run(plan, call.backward_data()), ATTNKIT_OK) << describe(shape) << ": " << last_error();
  }
}

TEST(CapiEmptyTensors, BackwardPlanRunOnNullKeysGivesZeroQueryGradients) {
  const AttentionCall call({1, 5, 2, 4}, {1, 0, 2, 4}, 4);
  const attnkit_attention_forward_args forward = call.forward_args();
  ASSERT_EQ(attnkit_attention_forward(&forward, nullptr), ATTNKIT_OK) << last_error();
  const Plan plan = backward_plan(call.backward_args());
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan_workspace(plan), 0);
  ASSERT_EQ(run(plan, call.backward_data()), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.grad_q.view, 0.0));
}

TEST(CapiEmptyTensors, PlanRunTakesNullOrAnAlignedAddressForAnEmptyTensor) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);
  const Plan made_with_null = forward_plan(call.forward_args());
  std::vector<void*> data = call.forward_data();
  data[1] = data[2] = aligned_address();  // empty k and v at an address of the alignment NULL stands for
  EXPECT_EQ(run(made_with_null, data), ATTNKIT_OK) << last_error();

  attnkit_attention_forward_args args = call.forward_args();
  args.k.data = args.v.data = aligned_address();  // a caller that gave empty tensors an address
  const Plan made_with_address = forward_plan(args);
  EXPECT_EQ(run(made_with_address, call.forward_data()), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
}

TEST(CapiEmptyTensors, PlanRunStillChecksTheAlignmentOfAnEmptyTensorsAddress) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);
  const Plan plan = forward_plan(call.forward_args());
  std::vector<void*> data = call.forward_data();
  data[1] = static_cast<char*>(aligned_address()) + 4;
  EXPECT_EQ(run(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("data[1] (k): address mod 16 is 4"), HasSubstr("allowed: 0")));
}

// --- NULL with elements -----------------------------------------------------------------------------

TEST(CapiEmptyTensors, NullDataOfARequiredTensorWithElementsIsRefusedNamingIt) {
  const AttentionCall call({1, 4, 2, 8}, {1, 6, 2, 8}, 8);
  attnkit_attention_forward_args forward = call.forward_args();
  forward.v.data = nullptr;
  EXPECT_EQ(attnkit_attention_forward(&forward, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("v: data pointer is null"), HasSubstr("null only for a tensor with an "
                                                                                  "extent 0")));
  attnkit_plan* plan = nullptr;
  EXPECT_EQ(attnkit_attention_forward_plan(&forward, nullptr, 0, &plan), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_THAT(last_error(), HasSubstr("v: data pointer is null"));

  attnkit_attention_backward_args backward = call.backward_args();
  backward.grad_out.data = nullptr;
  EXPECT_EQ(attnkit_attention_backward(&backward, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("grad_out: data pointer is null"));

  const HostTensor a = random_tensor(DType::f32, {4, 3}, 9);
  const HostTensor b = random_tensor(DType::f32, {3, 5}, 10);
  const HostTensor c = poisoned_tensor(DType::f32, {4, 5});
  attnkit_gemm_args gemm;
  attnkit_gemm_args_init(&gemm);
  gemm.a = capi::to_c_tensor(a.view);
  gemm.b = capi::to_c_tensor(b.view);
  gemm.c = capi::to_c_tensor(c.view);
  gemm.b.data = nullptr;
  EXPECT_EQ(attnkit_gemm(&gemm, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("b: data pointer is null"));
}

TEST(CapiEmptyTensors, PlanRunRefusesNullForATensorWithElements) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);  // k, v empty; q, out, lse have elements
  const Plan plan = forward_plan(call.forward_args());
  std::vector<void*> data = call.forward_data();
  data[0] = nullptr;
  EXPECT_EQ(run(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("data[0] (q): NULL"), HasSubstr("allowed: a tensor")));
  data = call.forward_data();
  data[4] = nullptr;
  EXPECT_EQ(run(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("data[4] (lse): NULL"));
}

// --- absent stays absent ----------------------------------------------------------------------------

TEST(CapiEmptyTensors, AnAbsentOptionalTensorStaysAbsent) {
  const AttentionCall call({2, 5, 2, 8}, {2, 0, 2, 8}, 8);
  attnkit_attention_forward_args args = call.forward_args();
  args.lse = attnkit_tensor{};  // rank 0, NULL: not given
  ASSERT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_OK) << last_error();
  EXPECT_TRUE(all_equal(call.out.view, 0.0));
  EXPECT_TRUE(std::isnan(to_doubles(call.lse.view).front())) << "lse was written although absent";

  const Plan plan = forward_plan(args);
  std::vector<void*> data = call.forward_data();
  data[4] = nullptr;
  EXPECT_EQ(run(plan, data), ATTNKIT_OK) << last_error();
  data[4] = call.lse.view.data;
  EXPECT_EQ(run(plan, data), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("data[4] (lse): a tensor"), HasSubstr("the plan was made without it")));
}

TEST(CapiEmptyTensors, AnEmptyNullTensorIsPresentAndValidated) {
  // Batch 0: an lse with the wrong head count is refused although it has no elements and no data.
  const AttentionCall call({0, 5, 2, 8}, {0, 6, 2, 8}, 8);
  const HostTensor lse = empty_tensor(DType::f32, {0, 5, 3});
  attnkit_attention_forward_args args = call.forward_args();
  args.lse = capi::to_c_tensor(lse.view);
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("lse"));

  args = call.forward_args();
  args.k.dtype = ATTNKIT_FLOAT16;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("k: dtype float16 differs from q's float32"));
}

// --- dtype messages ---------------------------------------------------------------------------------

TEST(CapiEmptyTensors, OutOfRangeDtypeOfAFloatArgumentDoesNotOfferBool) {
  const AttentionCall call({1, 4, 2, 8}, {1, 6, 2, 8}, 8);
  attnkit_attention_forward_args args = call.forward_args();
  args.q.dtype = 9;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("q.dtype: 9; allowed: 0 (ATTNKIT_FLOAT32), 1 (FLOAT16), 2 (BFLOAT16), "
                                            "3 (FLOAT64)"),
                                  Not(HasSubstr("BOOL"))));

  args = call.forward_args();
  args.lse.dtype = -1;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("lse.dtype: -1; allowed: 0 (ATTNKIT_FLOAT32)"), Not(HasSubstr("BOOL")),
                                  Not(HasSubstr("FLOAT16"))));

  const HostTensor a = random_tensor(DType::f32, {4, 3}, 9);
  attnkit_gemm_args gemm;
  attnkit_gemm_args_init(&gemm);
  gemm.a = capi::to_c_tensor(a.view);
  gemm.a.dtype = 5;
  EXPECT_EQ(attnkit_gemm(&gemm, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("a.dtype: 5"), Not(HasSubstr("BOOL"))));

  const HostTensor state = random_tensor(DType::f32, {1, 2, 8, 8}, 11);
  attnkit_retention_forward_args retention;
  attnkit_retention_forward_args_init(&retention);
  retention.initial_state = capi::to_c_tensor(state.view);
  retention.initial_state.dtype = 7;
  EXPECT_EQ(attnkit_retention_forward(&retention, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), AllOf(HasSubstr("initial_state.dtype: 7; allowed: 0 (ATTNKIT_FLOAT32), or 3 (FLOAT64)"),
                                  Not(HasSubstr("BOOL"))));
}

TEST(CapiEmptyTensors, OutOfRangeDtypeOfAMaskOffersBool) {
  const AttentionCall call({1, 4, 2, 8}, {1, 6, 2, 8}, 8);
  const HostTensor mask = HostTensor::contiguous(DType::boolean, {1, 1, 4, 6});
  attnkit_attention_forward_args args = call.forward_args();
  args.mask.kind = ATTNKIT_MASK_ELEMENT;
  args.mask.element_mask = capi::to_c_tensor(mask.view);
  args.mask.element_mask.dtype = 9;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(),
              AllOf(HasSubstr("mask.element_mask.dtype: 9; allowed: 4 (ATTNKIT_BOOL)"), Not(HasSubstr("FLOAT32"))));

  args = call.forward_args();
  args.mask.kind = ATTNKIT_MASK_BLOCK;
  args.mask.block_mask = capi::to_c_tensor(mask.view);
  args.mask.block_mask.dtype = 9;
  EXPECT_EQ(attnkit_attention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(last_error(), HasSubstr("mask.block_mask.dtype: 9; allowed: 4 (ATTNKIT_BOOL)"));
}

}  // namespace
}  // namespace attnkit::test
