// Validation of attention_forward / attention_backward: one test per rule. Each breaks one rule of a
// valid problem and checks the status and that the message names the argument, the value received
// and what is allowed.
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string forward_error(const AttentionForward& p, const RunOptions& options = {}) {
  return error_message([&] { detail::validate_attention_forward(p, options); });
}

std::string backward_error(const AttentionBackward& p) {
  return error_message([&] { detail::validate_attention_backward(p, {}); });
}

TEST(ValidateAttention, ValidForwardPasses) {
  EXPECT_NO_THROW(detail::validate_attention_forward(valid_attention_forward(), {}));
}

TEST(ValidateAttention, ValidBackwardPasses) {
  EXPECT_NO_THROW(detail::validate_attention_backward(valid_attention_backward(), {}));
}

TEST(ValidateAttention, LseIsOptionalInForward) {
  auto p = valid_attention_forward();
  p.lse = {};
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

TEST(ValidateAttention, EveryFloatingDtypePasses) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    EXPECT_NO_THROW(detail::validate_attention_forward(valid_attention_forward(dtype), {})) << dtype_name(dtype);
  }
}

TEST(ValidateAttention, CrossAttentionMayHaveOtherTokenRankAndExtents) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 11, 2, 8});
  p.v = view_of(DType::f32, {2, 11, 2, 7});
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

TEST(ValidateAttention, StridedViewsPass) {
  auto p = valid_attention_forward();
  // q as a slice of a packed [2, 6, 5, 3*4, 8] qkv tensor.
  p.q = with_strides(p.q, {6 * 5 * 12 * 8, 5 * 12 * 8, 12 * 8, 8, 1});
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

TEST(ValidateAttention, RequiredTensorMustBePresent) {
  auto p = valid_attention_forward();
  p.v.data = nullptr;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: data pointer is null"), HasSubstr("allowed: a tensor with data")));
}

TEST(ValidateAttention, OutMustBePresent) {
  auto p = valid_attention_forward();
  p.out = {};
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("out: data pointer is null"), HasSubstr("out is required")));
}

TEST(ValidateAttention, RankBelowFourIsRejected) {
  auto p = valid_attention_forward();
  p.q = view_of(DType::f32, {2, 4, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: rank 3"), HasSubstr("[2, 4, 8]"), HasSubstr("allowed: rank 4 to 6"),
                                      HasSubstr("[B, *tokens_q, Hq, D]")));
}

TEST(ValidateAttention, RankAboveSixIsRejected) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 2, 2, 2, 2, 2, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: rank 7"), HasSubstr("allowed: rank 4 to 6")));
}

TEST(ValidateAttention, RankOutsideTensorViewBoundsIsRejected) {
  auto p = valid_attention_forward();
  p.q.rank = 40;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: rank 40"), HasSubstr("allowed: rank 4 to 6")));
}

TEST(ValidateAttention, KeyAndValueRanksMustBeEqual) {
  auto p = valid_attention_forward();
  p.v = view_of(DType::f32, {2, 30, 2, 7});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: rank 4"), HasSubstr("allowed: rank 5, equal to k's")));
}

TEST(ValidateAttention, KeyAndValueTokenExtentsMustBeEqual) {
  auto p = valid_attention_forward();
  p.v = view_of(DType::f32, {2, 6, 4, 2, 7});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: tokens_kv[1] = 4"), HasSubstr("allowed: 5, k's token extent")));
}

TEST(ValidateAttention, BatchMustBeEqualAcrossTensors) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {3, 6, 5, 2, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: batch 3"), HasSubstr("allowed: 2, q's batch")));
}

TEST(ValidateAttention, QueryHeadsMustBeAMultipleOfKeyHeads) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 6, 5, 3, 8});
  p.v = view_of(DType::f32, {2, 6, 5, 3, 7});
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("k: heads 3"), HasSubstr("q's heads 4"), HasSubstr("allowed: Hkv dividing Hq")));
}

TEST(ValidateAttention, KeyAndValueHeadsMustBeEqual) {
  auto p = valid_attention_forward();
  p.v = view_of(DType::f32, {2, 6, 5, 4, 7});
  p.out = view_of(DType::f32, {2, 6, 5, 4, 7});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: heads 4"), HasSubstr("allowed: 2, k's heads")));
}

TEST(ValidateAttention, QueryAndKeyHeadDimsMustBeEqual) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 6, 5, 2, 16});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: head_dim 16"), HasSubstr("allowed: 8, q's head_dim")));
}

TEST(ValidateAttention, OutputShapeMustBeQueryTokensHeadsAndValueDim) {
  auto p = valid_attention_forward();
  p.out = view_of(DType::f32, {2, 6, 5, 4, 8});  // Dv is 7
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("out: shape [2, 6, 5, 4, 8]"), HasSubstr("allowed: [2, 6, 5, 4, 7]"),
                                      HasSubstr("[B, *tokens_q, Hq, Dv]")));
}

TEST(ValidateAttention, LseShapeMustBeQueryTokensAndHeads) {
  auto p = valid_attention_forward();
  p.lse = view_of(DType::f32, {2, 6, 5, 2});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("lse: shape [2, 6, 5, 2]"), HasSubstr("allowed: [2, 6, 5, 4]")));
}

TEST(ValidateAttention, LseMustBeFloat32) {
  auto p = valid_attention_forward(DType::f16);
  p.lse.dtype = DType::f16;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("lse: dtype float16"), HasSubstr("allowed: float32")));
}

TEST(ValidateAttention, LseIsRequiredInBackward) {
  auto p = valid_attention_backward();
  p.lse = {};
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("lse: data pointer is null"), HasSubstr("lse is required")));
}

TEST(ValidateAttention, GradientsMustHaveTheirPrimalsShape) {
  auto p = valid_attention_backward();
  p.grad_k = view_of(DType::f32, {2, 6, 5, 4, 8});
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("grad_k: shape [2, 6, 5, 4, 8]"),
                                       HasSubstr("allowed: [2, 6, 5, 2, 8]"), HasSubstr("k's shape")));
}

TEST(ValidateAttention, GradOutMustHaveTheOutputShape) {
  auto p = valid_attention_backward();
  p.grad_out = view_of(DType::f32, {2, 6, 5, 4, 6});
  EXPECT_THAT(backward_error(p),
              AllOf(HasSubstr("grad_out: shape [2, 6, 5, 4, 6]"), HasSubstr("allowed: [2, 6, 5, 4, 7]")));
}

TEST(ValidateAttention, DtypeMustBeFloating) {
  auto p = valid_attention_forward();
  p.q.dtype = DType::boolean;
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("q: dtype bool"), HasSubstr("allowed: float32, float16, bfloat16, float64")));
}

TEST(ValidateAttention, UnknownDtypeValueIsRejected) {
  auto p = valid_attention_forward();
  p.q.dtype = static_cast<DType>(42);
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: dtype unknown (42)"), HasSubstr("allowed: float32")));
}

TEST(ValidateAttention, AllFloatingTensorsShareOneDtype) {
  auto p = valid_attention_forward();
  p.v.dtype = DType::bf16;
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("v: dtype bfloat16 differs from q's float32"), HasSubstr("allowed: float32")));
}

TEST(ValidateAttention, GradientDtypeMustMatch) {
  auto p = valid_attention_backward();
  p.grad_q.dtype = DType::f64;
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("grad_q: dtype float64"), HasSubstr("allowed: float32")));
}

TEST(ValidateAttention, AllTensorsOnOneDevice) {
  auto p = valid_attention_forward();
  p.out.device = Device{DeviceType::cuda, 0};
  EXPECT_THAT(forward_error(p),
              AllOf(HasSubstr("out: device cuda:0 differs from q's device cpu:0"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateAttention, DeviceIndexMustMatch) {
  auto p = valid_attention_forward();
  for (TensorView* view : {&p.q, &p.k, &p.v, &p.out, &p.lse}) {
    view->device = Device{DeviceType::cuda, 0};
  }
  p.lse.device.index = 1;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("lse: device cuda:1"), HasSubstr("allowed: cuda:0")));
}

TEST(ValidateAttention, DeviceTypeMustBeKnown) {
  auto p = valid_attention_forward();
  p.k.device.type = static_cast<DeviceType>(7);
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k.device.type: 7"), HasSubstr("allowed: 0 (cpu) or 1 (cuda)")));
}

TEST(ValidateAttention, DeviceIndexMustBeNonNegative) {
  auto p = valid_attention_forward();
  p.k.device.index = -2;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k.device.index: -2"), HasSubstr("allowed: an index >= 0")));
}

TEST(ValidateAttention, LastDimensionMustBeContiguous) {
  auto p = valid_attention_forward();
  p.k = with_strides(p.k, {6 * 5 * 2 * 16, 5 * 2 * 16, 2 * 16, 16, 2});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: stride 2 in the last dim"), HasSubstr("allowed: 1")));
}

TEST(ValidateAttention, ExtentsMustBeNonNegative) {
  auto p = valid_attention_forward();
  p.q = view_of(DType::f32, {2, -1, 5, 4, 8});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: extent -1 in dim 1"), HasSubstr("allowed: every extent >= 0")));
}

TEST(ValidateAttention, StridesMustBeNonNegative) {
  auto p = valid_attention_forward();
  p.v = with_strides(p.v, {420, 70, -14, 7, 1});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("v: stride -14 in dim 2"), HasSubstr("allowed: strides >= 0")));
}

TEST(ValidateAttention, LargestOffsetMustFitInt64) {
  auto p = valid_attention_forward();
  p.q = with_strides(p.q, {int64_t{1} << 62, 160, 32, 8, 1});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: shape [2, 6, 5, 4, 8]"), HasSubstr("4611686018427387904"),
                                      HasSubstr("must fit in int64")));
}

TEST(ValidateAttention, ElementCountMustFitInt64) {
  auto p = valid_attention_forward();
  // Broadcast over huge extents (stride 0) keeps offsets small but the element count overflows.
  p.k = strided_view(DType::f32, {2, int64_t{1} << 40, int64_t{1} << 30, 2, 8}, {0, 0, 0, 8, 1});
  p.v = strided_view(DType::f32, {2, int64_t{1} << 40, int64_t{1} << 30, 2, 7}, {0, 0, 0, 7, 1});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("k: shape [2, 1099511627776, 1073741824, 2, 8]"),
                                      HasSubstr("element count"), HasSubstr("must fit in int64")));
}

TEST(ValidateAttention, DataPointerMustBeAlignedToItsElementSize) {
  auto p = valid_attention_forward();
  p.q.data = static_cast<unsigned char*>(p.q.data) + 2;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("q: data pointer 0x"), HasSubstr("not aligned"),
                                      HasSubstr("allowed: an address that is a multiple of 4 bytes")));
}

TEST(ValidateAttention, OutputMayNotBroadcast) {
  auto p = valid_attention_forward();
  p.out = with_strides(p.out, {0, 140, 28, 7, 1});
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("out: stride 0 in dim 0 of extent 2"),
                                      HasSubstr("allowed: an output may not broadcast")));
}

TEST(ValidateAttention, InputsMayBroadcast) {
  auto p = valid_attention_forward();
  p.k = with_strides(p.k, {0, 80, 16, 8, 1});
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

TEST(ValidateAttention, ScaleMustBePositive) {
  auto p = valid_attention_forward();
  p.scale = -0.5;
  EXPECT_THAT(forward_error(p), AllOf(HasSubstr("scale: -0.5"), HasSubstr("allowed: a finite value > 0")));
}

TEST(ValidateAttention, ScaleMustBeFinite) {
  auto p = valid_attention_backward();
  p.scale = std::numeric_limits<double>::infinity();
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("scale: inf"), HasSubstr("allowed: a finite value > 0")));
}

TEST(ValidateAttention, KvSplitsFromZeroToTheMaximumPass) {
  auto p = valid_attention_backward();
  for (int32_t kv_splits : {0, 1, 2, kMaxBackwardKvSplits}) {
    p.kv_splits = kv_splits;
    EXPECT_NO_THROW(detail::validate_attention_backward(p, {})) << kv_splits;
  }
}

TEST(ValidateAttention, KvSplitsAboveTheMaximumIsRejected) {
  auto p = valid_attention_backward();
  p.kv_splits = kMaxBackwardKvSplits + 1;
  EXPECT_THAT(backward_error(p),
              AllOf(HasSubstr("kv_splits: 129"), HasSubstr("allowed: 0 (automatic), 1 (never split)"),
                    HasSubstr("2 to 128 (kMaxBackwardKvSplits)")));
}

TEST(ValidateAttention, NegativeKvSplitsIsRejected) {
  auto p = valid_attention_backward();
  p.kv_splits = -1;
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("kv_splits: -1"), HasSubstr("allowed: 0 (automatic)")));
}

TEST(ValidateAttention, SplitWorkspaceLimitOfMinusOneZeroOrBytesPasses) {
  auto p = valid_attention_backward();
  for (int64_t limit : {int64_t{-1}, int64_t{0}, int64_t{1}, std::numeric_limits<int64_t>::max()}) {
    p.split_workspace_limit = limit;
    EXPECT_NO_THROW(detail::validate_attention_backward(p, {})) << limit;
  }
}

TEST(ValidateAttention, SplitWorkspaceLimitBelowMinusOneIsRejected) {
  auto p = valid_attention_backward();
  p.split_workspace_limit = -2;
  EXPECT_THAT(backward_error(p), AllOf(HasSubstr("split_workspace_limit: -2"),
                                       HasSubstr("allowed: -1 (the default bound, 67108864 bytes)"),
                                       HasSubstr("0 (never split automatically) or a byte count > 0")));
}

TEST(ValidateAttention, BackendMustBeKnown) {
  RunOptions options;
  options.backend = static_cast<Backend>(9);
  EXPECT_THAT(forward_error(valid_attention_forward(), options),
              AllOf(HasSubstr("options.backend: 9"), HasSubstr("allowed: 0 (auto), 1 (cpu), 2 (cuda)")));
}

TEST(ValidateAttention, ThreadCountMustBeNonNegative) {
  RunOptions options;
  options.num_threads = -3;
  EXPECT_THAT(forward_error(valid_attention_forward(), options),
              AllOf(HasSubstr("options.num_threads: -3"), HasSubstr("allowed: 0 (all available threads)")));
}

}  // namespace
}  // namespace attnkit::test
