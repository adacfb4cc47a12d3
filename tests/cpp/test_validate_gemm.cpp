// Validation of gemm: one test per rule. The valid problem has a [3, 7, 5], b [3, 5, 6],
// c [3, 7, 6] (batch 3, m 7, k 5, n 6).
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string gemm_error(const GemmProblem& p) {
  return error_message([&] { detail::validate_gemm(p, {}); });
}

// The view of a column-major [rows, cols] matrix (rows stride 1).
TensorView column_major(DType dtype, int64_t rows, int64_t cols) {
  return with_strides(view_of(dtype, {rows, cols}), {1, rows});
}

TEST(ValidateGemm, ValidProblemPasses) { EXPECT_NO_THROW(detail::validate_gemm(valid_gemm(), {})); }

TEST(ValidateGemm, TransposedColumnMajorOperandsPass) {
  GemmProblem p;
  p.a = column_major(DType::bf16, 5, 7);  // op(a) = a^T is 7 x 5
  p.b = column_major(DType::bf16, 6, 5);  // op(b) = b^T is 5 x 6
  p.c = column_major(DType::bf16, 7, 6);
  p.transpose_a = true;
  p.transpose_b = true;
  EXPECT_NO_THROW(detail::validate_gemm(p, {}));
}

TEST(ValidateGemm, RankTwoOperandsBroadcastOverTheBatch) {
  auto p = valid_gemm();
  p.b = view_of(DType::f32, {5, 6});
  EXPECT_NO_THROW(detail::validate_gemm(p, {}));
  p.a = view_of(DType::f32, {1, 7, 5});
  EXPECT_NO_THROW(detail::validate_gemm(p, {}));
}

TEST(ValidateGemm, AllowTf32IsNeverAnError) {
  auto p = valid_gemm(DType::f16);
  p.allow_tf32 = true;
  EXPECT_NO_THROW(detail::validate_gemm(p, {}));
}

TEST(ValidateGemm, MatricesMustBePresent) {
  auto p = valid_gemm();
  p.c = {};
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("c: data pointer is null"), HasSubstr("c is required")));
}

TEST(ValidateGemm, RankMustBeTwoOrThree) {
  auto p = valid_gemm();
  p.a = view_of(DType::f32, {35});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("a: rank 1"), HasSubstr("allowed: rank 2 to 3"),
                                   HasSubstr("[rows, cols] or [batch, rows, cols]")));
}

TEST(ValidateGemm, OneOfTheLastTwoStridesMustBeOne) {
  auto p = valid_gemm();
  p.b = with_strides(p.b, {60, 12, 2});
  EXPECT_THAT(gemm_error(p),
              AllOf(HasSubstr("b: strides [60, 12, 2]"),
                    HasSubstr("allowed: stride 1 in the last dim (row-major) or in the second-to-last")));
}

TEST(ValidateGemm, InnerDimensionsMustAgree) {
  auto p = valid_gemm();
  p.b = view_of(DType::f32, {3, 4, 6});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("b: op(b) = 4 x 6"), HasSubstr("transpose_b=false"),
                                   HasSubstr("allowed: 5 rows, matching the 5 columns (k) of op(a) = 7 x 5")));
}

TEST(ValidateGemm, TransposeChangesWhichDimensionIsInner) {
  auto p = valid_gemm();
  p.transpose_a = true;  // op(a) becomes 5 x 7, so k = 7 but b has 5 rows
  EXPECT_THAT(gemm_error(p),
              AllOf(HasSubstr("b: op(b) = 5 x 6"), HasSubstr("allowed: 7 rows"), HasSubstr("transpose_a=true")));
}

TEST(ValidateGemm, OutputMustBeMByN) {
  auto p = valid_gemm();
  p.c = view_of(DType::f32, {3, 6, 7});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("c: 6 x 7"), HasSubstr("allowed: 7 x 6, m x n")));
}

TEST(ValidateGemm, OperandBatchMustBeOneOrTheBatch) {
  auto p = valid_gemm();
  p.a = view_of(DType::f32, {2, 7, 5});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("a: batch 2"), HasSubstr("allowed: 1 (broadcast) or 3")));
}

TEST(ValidateGemm, OutputBatchMustBeTheLargestBatch) {
  auto p = valid_gemm();
  p.c = view_of(DType::f32, {7, 6});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("c: batch 1"), HasSubstr("allowed: 3, the largest batch")));
}

TEST(ValidateGemm, OutputMayNotBroadcast) {
  auto p = valid_gemm();
  p.c = with_strides(p.c, {0, 6, 1});
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("c: stride 0 in dim 0 of extent 3"), HasSubstr("may not broadcast")));
}

TEST(ValidateGemm, DtypesMustBeEqual) {
  auto p = valid_gemm();
  p.c.dtype = DType::f16;
  EXPECT_THAT(gemm_error(p),
              AllOf(HasSubstr("c: dtype float16 differs from a's float32"), HasSubstr("allowed: float32")));
}

TEST(ValidateGemm, DtypeMustBeFloating) {
  auto p = valid_gemm(DType::boolean);
  EXPECT_THAT(gemm_error(p),
              AllOf(HasSubstr("a: dtype bool"), HasSubstr("allowed: float32, float16, bfloat16, float64")));
}

TEST(ValidateGemm, MatricesMustShareOneDevice) {
  auto p = valid_gemm();
  p.b.device = Device{DeviceType::cuda, 0};
  EXPECT_THAT(gemm_error(p),
              AllOf(HasSubstr("b: device cuda:0 differs from a's device cpu:0"), HasSubstr("allowed: cpu:0")));
}

TEST(ValidateGemm, AlphaMustBeFinite) {
  auto p = valid_gemm();
  p.alpha = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("alpha: nan"), HasSubstr("allowed: a finite value")));
}

TEST(ValidateGemm, BetaMustBeFinite) {
  auto p = valid_gemm();
  p.beta = -std::numeric_limits<double>::infinity();
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("beta: -inf"), HasSubstr("allowed: a finite value")));
}

TEST(ValidateGemm, DataPointerMustBeAligned) {
  auto p = valid_gemm(DType::f64);
  p.b.data = static_cast<unsigned char*>(p.b.data) + 4;
  EXPECT_THAT(gemm_error(p), AllOf(HasSubstr("b: data pointer 0x"), HasSubstr("multiple of 8 bytes")));
}

}  // namespace
}  // namespace attnkit::test
