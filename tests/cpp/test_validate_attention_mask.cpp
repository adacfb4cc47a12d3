// Validation of attention masks (DESIGN §3): neighborhood parameters per dimension, block and
// element mask tensors. The valid problem has 2-D tokens 6x5, batch 2 and Hq 4.
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string mask_error(const AttentionMask& mask, AttentionForward p = valid_attention_forward()) {
  p.mask = mask;
  return error_message([&] { detail::validate_attention_forward(p, {}); });
}

void expect_mask_passes(const AttentionMask& mask, AttentionForward p = valid_attention_forward()) {
  p.mask = mask;
  EXPECT_NO_THROW(detail::validate_attention_forward(p, {}));
}

// [2, 16, 16, 4, 8] queries and keys for neighborhood extent tests.
AttentionForward grid_16x16() {
  AttentionForward p;
  p.q = view_of(DType::f32, {2, 16, 16, 4, 8});
  p.k = view_of(DType::f32, {2, 16, 16, 4, 8});
  p.v = view_of(DType::f32, {2, 16, 16, 4, 8});
  p.out = view_of(DType::f32, {2, 16, 16, 4, 8});
  return p;
}

TEST(ValidateAttentionMask, EveryValidMaskKindPasses) {
  expect_mask_passes(causal_mask(CausalAlignment::bottom_right));
  expect_mask_passes(neighborhood_mask({3, 5}, {2, 1}, {1, 5}, {true, false}));
  expect_mask_passes(block_sparse_mask(view_of(DType::boolean, {2, 4, 4, 8}), 8, 4));  // Sq 30, Sk 30
  expect_mask_passes(element_sparse_mask(view_of(DType::boolean, {1, 1, 30, 30})));
}

TEST(ValidateAttentionMask, KindMustBeKnown) {
  AttentionMask mask;
  mask.kind = static_cast<MaskKind>(11);
  EXPECT_THAT(mask_error(mask), AllOf(HasSubstr("mask.kind: 11"), HasSubstr("allowed: 0 (none), 1 (causal)")));
}

TEST(ValidateAttentionMask, CausalAlignmentMustBeKnown) {
  AttentionMask mask = causal_mask();
  mask.causal_alignment = static_cast<CausalAlignment>(2);
  EXPECT_THAT(mask_error(mask),
              AllOf(HasSubstr("mask.causal_alignment: 2"), HasSubstr("allowed: 0 (top_left) or 1 (bottom_right)")));
}

TEST(ValidateAttentionMask, NeighborhoodDimsMustEqualTokenRank) {
  EXPECT_THAT(mask_error(neighborhood_mask({3})),
              AllOf(HasSubstr("mask.dims: 1"), HasSubstr("allowed: 2, the number of token dimensions of q")));
}

TEST(ValidateAttentionMask, NeighborhoodNeedsEqualQueryAndKeyTokens) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 6, 6, 2, 8});
  p.v = view_of(DType::f32, {2, 6, 6, 2, 7});
  EXPECT_THAT(mask_error(neighborhood_mask({3, 3}), p),
              AllOf(HasSubstr("k: tokens_kv [6, 6]"), HasSubstr("allowed: [6, 5], q's token extents")));
}

TEST(ValidateAttentionMask, NeighborhoodNeedsEqualQueryAndKeyTokenRank) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 30, 2, 8});
  p.v = view_of(DType::f32, {2, 30, 2, 7});
  EXPECT_THAT(mask_error(neighborhood_mask({3, 3}), p),
              AllOf(HasSubstr("k: tokens_kv [30]"), HasSubstr("allowed: [6, 5]")));
}

TEST(ValidateAttentionMask, KernelSizeMustBePositive) {
  EXPECT_THAT(mask_error(neighborhood_mask({3, 0})),
              AllOf(HasSubstr("mask.neighborhood[1].kernel_size: 0"), HasSubstr("allowed: kernel_size >= 1")));
}

TEST(ValidateAttentionMask, DilationMustBePositive) {
  EXPECT_THAT(mask_error(neighborhood_mask({3, 3}, {0, 1})),
              AllOf(HasSubstr("mask.neighborhood[0].dilation: 0"), HasSubstr("allowed: dilation >= 1")));
}

TEST(ValidateAttentionMask, KernelTimesDilationMustFitTheExtent) {
  EXPECT_EQ(mask_error(neighborhood_mask({3, 9}, {1, 2}), grid_16x16()),
            "mask.neighborhood[1].kernel_size: 9 with dilation 2 spans 18 tokens but tokens[1] is 16; allowed: "
            "kernel_size*dilation <= extent (an extent 0 has no tokens and takes any kernel_size)");
}

TEST(ValidateAttentionMask, KernelEqualToExtentPasses) {
  expect_mask_passes(neighborhood_mask({16, 8}, {1, 2}), grid_16x16());
}

TEST(ValidateAttentionMask, HugeKernelTimesDilationDoesNotOverflow) {
  EXPECT_THAT(mask_error(neighborhood_mask({int64_t{1} << 40, 3}, {int64_t{1} << 40, 1})),
              AllOf(HasSubstr("mask.neighborhood[0].kernel_size: 1099511627776"),
                    HasSubstr("spans more than int64 holds"), HasSubstr("allowed: kernel_size*dilation <= extent")));
}

TEST(ValidateAttentionMask, StrideMustBeAtLeastOne) {
  EXPECT_THAT(mask_error(neighborhood_mask({3, 3}, {}, {0, 1})),
              AllOf(HasSubstr("mask.neighborhood[0].stride: 0"), HasSubstr("allowed: 1 <= stride <= kernel_size (3)")));
}

TEST(ValidateAttentionMask, StrideMayNotExceedKernelSize) {
  EXPECT_THAT(mask_error(neighborhood_mask({3, 3}, {}, {1, 4})),
              AllOf(HasSubstr("mask.neighborhood[1].stride: 4"), HasSubstr("allowed: 1 <= stride <= kernel_size (3)")));
}

TEST(ValidateAttentionMask, BlockSizesMustBePositive) {
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::boolean, {2, 4, 4, 8}), 0, 4)),
              AllOf(HasSubstr("mask.block_q: 0"), HasSubstr("allowed: a block size >= 1")));
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::boolean, {2, 4, 4, 8}), 8, -1)),
              AllOf(HasSubstr("mask.block_k: -1"), HasSubstr("allowed: a block size >= 1")));
}

TEST(ValidateAttentionMask, BlockMaskTensorMustBePresent) {
  EXPECT_THAT(mask_error(block_sparse_mask(TensorView{}, 8, 4)),
              AllOf(HasSubstr("mask.block_mask: data pointer is null"), HasSubstr("is required")));
}

TEST(ValidateAttentionMask, BlockMaskMustBeBool) {
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::f32, {2, 4, 4, 8}), 8, 4)),
              AllOf(HasSubstr("mask.block_mask: dtype float32"), HasSubstr("allowed: bool")));
}

TEST(ValidateAttentionMask, BlockMaskMustBeRankFour) {
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::boolean, {4, 8}), 8, 4)),
              AllOf(HasSubstr("mask.block_mask: rank 2"), HasSubstr("allowed: rank 4"),
                    HasSubstr("[B|1, Hq|1, ceil(Sq/block_q), ceil(Sk/block_k)]")));
}

TEST(ValidateAttentionMask, BlockMaskExtentsCountBlocksRoundedUp) {
  // Sq = Sk = 30: ceil(30/8) = 4 block rows, ceil(30/4) = 8 block columns; 7 is one short.
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::boolean, {2, 4, 4, 7}), 8, 4)),
              AllOf(HasSubstr("mask.block_mask: shape [2, 4, 4, 7]"), HasSubstr("allowed: [2 or 1, 4 or 1, 4, 8]")));
}

TEST(ValidateAttentionMask, BlockMaskBatchMustBeBatchOrOne) {
  EXPECT_THAT(mask_error(block_sparse_mask(view_of(DType::boolean, {3, 1, 4, 8}), 8, 4)),
              AllOf(HasSubstr("mask.block_mask: shape [3, 1, 4, 8]"), HasSubstr("allowed: [2 or 1, 4 or 1, 4, 8]")));
}

TEST(ValidateAttentionMask, BlockMaskMustBeOnTheQueryDevice) {
  EXPECT_THAT(
      mask_error(block_sparse_mask(view_of(DType::boolean, {2, 4, 4, 8}, Device{DeviceType::cuda, 0}), 8, 4)),
      AllOf(HasSubstr("mask.block_mask: device cuda:0 differs from q's device cpu:0"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateAttentionMask, BlockMaskCountsFlattenedKeysOfCrossAttention) {
  auto p = valid_attention_forward();
  p.k = view_of(DType::f32, {2, 11, 2, 8});  // Sk 11: ceil(11/4) = 3 block columns
  p.v = view_of(DType::f32, {2, 11, 2, 7});
  expect_mask_passes(block_sparse_mask(view_of(DType::boolean, {1, 4, 4, 3}), 8, 4), p);
}

TEST(ValidateAttentionMask, ElementMaskExtentsAreSequenceLengths) {
  EXPECT_THAT(mask_error(element_sparse_mask(view_of(DType::boolean, {2, 4, 30, 29}))),
              AllOf(HasSubstr("mask.element_mask: shape [2, 4, 30, 29]"),
                    HasSubstr("allowed: [2 or 1, 4 or 1, 30, 30]"), HasSubstr("[B|1, Hq|1, Sq, Sk]")));
}

TEST(ValidateAttentionMask, ElementMaskMustBeRankFour) {
  EXPECT_THAT(mask_error(element_sparse_mask(view_of(DType::boolean, {30, 30}))),
              AllOf(HasSubstr("mask.element_mask: rank 2"), HasSubstr("allowed: rank 4")));
}

TEST(ValidateAttentionMask, ElementMaskMustBeOnTheQueryDevice) {
  EXPECT_THAT(mask_error(element_sparse_mask(view_of(DType::boolean, {1, 1, 30, 30}, Device{DeviceType::cuda, 1}))),
              AllOf(HasSubstr("mask.element_mask: device cuda:1"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateAttentionMask, ElementMaskLastDimMustBeContiguous) {
  auto mask = element_sparse_mask(with_strides(view_of(DType::boolean, {1, 1, 30, 30}), {1800, 1800, 60, 2}));
  EXPECT_THAT(mask_error(mask),
              AllOf(HasSubstr("mask.element_mask: stride 2 in the last dim"), HasSubstr("allowed: 1")));
}

TEST(ValidateAttentionMask, MaskIsCheckedInBackwardToo) {
  auto p = valid_attention_backward();
  p.mask = neighborhood_mask({7, 3});
  EXPECT_THAT(error_message([&] { detail::validate_attention_backward(p, {}); }),
              AllOf(HasSubstr("mask.neighborhood[0].kernel_size: 7"), HasSubstr("tokens[0] is 6")));
}

}  // namespace
}  // namespace attnkit::test
