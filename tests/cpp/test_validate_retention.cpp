// Validation of retention_forward / retention_backward: one test per rule. The valid problem has
// q, k [2, 9, 3, 8] and v [2, 9, 3, 5] (B 2, T 9, H 3, Dk 8, Dv 5).
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string forward_error(const RetentionForward& p) {
  return error_message([&] { detail::validate_retention_forward(p, {}); });
}

std::string backward_error(const RetentionBackward& p) {
  return error_message([&] { detail::validate_retention_backward(p, {}); });
}

TensorView state_view(DType dtype = DType::f32) { return view_of(dtype, {2, 3, 8, 5}); }

TEST(ValidateRetention, ValidForwardPassesInEveryMode) {
  for (RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    auto p = valid_retention_forward();
    p.mode = mode;
    p.initial_state = state_view();
    p.final_state = state_view();
    p.gamma = {0.5, 0.9, 0.99};
    EXPECT_NO_THROW(detail::validate_retention_forward(p, {}));
  }
}

TEST(ValidateRetention, ValidBackwardPasses) {
  auto p = valid_retention_backward();
  p.initial_state = state_view();
  p.grad_final_state = state_view();
  p.grad_initial_state = state_view();
  EXPECT_NO_THROW(detail::validate_retention_backward(p, {}));
}

TEST(ValidateRetention, NormalizedParallelPasses) {
  auto p = valid_retention_forward();
  p.mode = RetentionMode::parallel;
  p.normalize = true;
  EXPECT_NO_THROW(detail::validate_retention_forward(p, {}));
}

TEST(ValidateRetention, OutputMustBePresent) {
  auto p = valid_retention_forward();
  p.out = {};
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("out: data pointer is null"), HasSubstr("out is required")));
}

TEST(ValidateRetention, InputsMustBeRankFour) {
  auto p = valid_retention_forward();
  p.q = view_of(DType::f32, {2, 9, 24});
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("q: rank 3"), HasSubstr("allowed: rank 4"), HasSubstr("[B, T, H, Dk]")));
}

TEST(ValidateRetention, KeyMustHaveTheQueryShape) {
  auto p = valid_retention_forward();
  p.k = view_of(DType::f32, {2, 9, 3, 6});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: shape [2, 9, 3, 6]"), HasSubstr("allowed: [2, 9, 3, 8]")));
}

TEST(ValidateRetention, ValueMustShareBatchTimeAndHeads) {
  auto p = valid_retention_forward();
  p.v = view_of(DType::f32, {2, 8, 3, 5});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: shape [2, 8, 3, 5]"), HasSubstr("allowed: [2, 9, 3, 5]")));
}

TEST(ValidateRetention, OutputShapeIsBatchTimeHeadsValueDim) {
  auto p = valid_retention_forward();
  p.out = view_of(DType::f32, {2, 9, 3, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("out: shape [2, 9, 3, 8]"), HasSubstr("allowed: [2, 9, 3, 5]")));
}

TEST(ValidateRetention, GradientsMustHaveTheirPrimalsShape) {
  auto p = valid_retention_backward();
  p.grad_v = view_of(DType::f32, {2, 9, 3, 8});
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("grad_v: shape [2, 9, 3, 8]"), HasSubstr("allowed: [2, 9, 3, 5]")));
}

TEST(ValidateRetention, AllSequenceTensorsShareOneDtype) {
  auto p = valid_retention_forward();
  p.v.dtype = DType::f16;
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("v: dtype float16 differs from q's float32"), HasSubstr("allowed: float32")));
}

TEST(ValidateRetention, DtypeMustBeFloating) {
  auto p = valid_retention_forward();
  p.q.dtype = DType::boolean;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: dtype bool"), HasSubstr("allowed: float32, float16")));
}

TEST(ValidateRetention, AllTensorsOnOneDevice) {
  auto p = valid_retention_forward();
  p.k.device = Device{DeviceType::cuda, 0};
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: device cuda:0"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateRetention, GammaNeedsOneValuePerHead) {
  auto p = valid_retention_forward();
  p.gamma = {0.9, 0.9};
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("gamma: 2 values"), HasSubstr("allowed: 3 (one per head)")));
}

TEST(ValidateRetention, GammaMustLieStrictlyBetweenZeroAndOne) {
  for (double bad : {0.0, 1.0, -0.5, std::numeric_limits<double>::quiet_NaN()}) {
    auto p = valid_retention_forward();
    p.gamma = {0.9, bad, 0.9};
    EXPECT_THAT(forward_error(p),
                AllOf(HasSubstr("gamma[1]: "), HasSubstr("allowed: a finite decay strictly between 0 and 1")));
  }
  auto p = valid_retention_forward();
  p.gamma = {0.9, 0.9, 1.5};
  EXPECT_THAT(forward_error(p), HasSubstr("gamma[2]: 1.5"));
}

TEST(ValidateRetention, ChunkSizeMustBePositive) {
  auto p = valid_retention_forward();
  p.chunk_size = 0;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("chunk_size: 0"), HasSubstr("allowed: chunk_size >= 1")));
}

TEST(ValidateRetention, ModeMustBeKnown) {
  auto p = valid_retention_forward();
  p.mode = static_cast<RetentionMode>(3);
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("mode: 3"), HasSubstr("allowed: 0 (parallel), 1 (chunkwise), 2 (recurrent)")));
}

TEST(ValidateRetention, StateMustBeFloat32ForLowPrecisionInputs) {
  auto p = valid_retention_forward(DType::bf16);
  p.initial_state = state_view(DType::bf16);
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("initial_state: dtype bfloat16"), HasSubstr("allowed: float32")));
}

TEST(ValidateRetention, StateMustBeFloat64ForFloat64Inputs) {
  auto p = valid_retention_forward(DType::f64);
  p.final_state = state_view(DType::f32);
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("final_state: dtype float32"), HasSubstr("allowed: float64")));
  p.final_state = state_view(DType::f64);
  EXPECT_NO_THROW(detail::validate_retention_forward(p, {}));
}

TEST(ValidateRetention, StateShapeIsBatchHeadsKeyDimValueDim) {
  auto p = valid_retention_forward();
  p.initial_state = view_of(DType::f32, {2, 3, 5, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("initial_state: shape [2, 3, 5, 8]"),
                                      HasSubstr("allowed: [2, 3, 8, 5]"), HasSubstr("[B, H, Dk, Dv]")));
}

TEST(ValidateRetention, StateMustBeOnTheQueryDevice) {
  auto p = valid_retention_backward();
  p.grad_initial_state = view_of(DType::f32, {2, 3, 8, 5}, Device{DeviceType::cuda, 0});
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("grad_initial_state: device cuda:0"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateRetention, NormalizeNeedsParallelMode) {
  auto p = valid_retention_forward();
  p.normalize = true;
  p.mode = RetentionMode::chunkwise;
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("normalize: true with mode=chunkwise"), HasSubstr("normalize=true needs every past key"),
                    HasSubstr("allowed: mode=parallel, or normalize=false")));
}

TEST(ValidateRetention, NormalizeExcludesInitialState) {
  auto p = valid_retention_forward();
  p.normalize = true;
  p.mode = RetentionMode::parallel;
  p.initial_state = state_view();
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("normalize: true with initial_state given"),
                                      HasSubstr("allowed: normalize=false when passing initial_state")));
}

TEST(ValidateRetention, NormalizeExcludesFinalStateInBackward) {
  auto p = valid_retention_backward();
  p.normalize = true;
  p.mode = RetentionMode::parallel;
  p.grad_final_state = state_view();
  EXPECT_THAT(backward_error(p),
              AllOf(HasSubstr("normalize: true with grad_final_state given"), HasSubstr("allowed: normalize=false")));
}

TEST(ValidateRetention, ScaleMustBeFinitePositive) {
  auto p = valid_retention_forward();
  p.scale = 0.0;
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("scale: 0"), HasSubstr("allowed: a finite value > 0"), HasSubstr("1/sqrt(Dk)")));
}

TEST(ValidateRetention, OutputMayNotBroadcast) {
  auto p = valid_retention_backward();
  p.grad_q = with_strides(p.grad_q, {216, 0, 8, 1});
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("grad_q: stride 0 in dim 1 of extent 9"),
                                       HasSubstr("allowed: an output may not broadcast")));
}

}  // namespace
}  // namespace attnkit::test
