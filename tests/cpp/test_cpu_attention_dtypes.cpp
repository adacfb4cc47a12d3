// fp32 / fp16 / bf16 through the CPU backend against the float64 reference run on the same
// (already rounded) inputs, within DESIGN §5's relative L2 tolerances; every output element is
// poisoned with NaN beforehand and must come back finite.
#include <gtest/gtest.h>

#include <string>

#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-5;
    case DType::f16: return 5e-3;
    case DType::bf16: return 1.5e-2;
    default: return 1e-12;
  }
}

struct MaskCase {
  std::string name;
  std::vector<int64_t> tokens;
  AttentionMask mask;
};

std::vector<MaskCase> mask_cases() {
  return {{"dense", {23}, AttentionMask{}},
          {"causal", {23}, causal_mask()},
          {"na2d", {9, 11}, neighborhood_mask({5, 3}, {1, 3})},
          {"na3d", {4, 5, 6}, neighborhood_mask({3, 3, 3}, {}, {1, 2, 1}, {false, false, true})}};
}

AttentionCase dtype_case(DType dtype, const MaskCase& m) {
  AttentionCase c;
  c.dtype = dtype;
  c.tokens = m.tokens;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 32;
  c.head_dim_v = 24;
  c.mask = m.mask;
  c.strided = true;
  c.seed = 21;
  return c;
}

class CpuAttentionDtype : public ::testing::TestWithParam<DType> {};

TEST_P(CpuAttentionDtype, ForwardMatchesFloat64ReferenceWithinTolerance) {
  for (const MaskCase& m : mask_cases()) {
    SCOPED_TRACE(m.name);
    AttentionTensors t(dtype_case(GetParam(), m));
    t.run_forward();
    t.run_reference_forward();
    EXPECT_TRUE(all_finite(t.out.view)) << "output not fully written, or not finite";
    EXPECT_TRUE(all_finite(t.lse.view)) << "LSE not fully written, or not finite";
    EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), tolerance_of(GetParam()));
    EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), 1e-5);
  }
}

TEST_P(CpuAttentionDtype, BackwardMatchesFloat64ReferenceWithinTolerance) {
  for (const MaskCase& m : mask_cases()) {
    SCOPED_TRACE(m.name);
    AttentionTensors t(dtype_case(GetParam(), m));
    t.run_forward();
    t.run_backward();
    t.run_reference_backward();
    EXPECT_TRUE(all_finite(t.grad_q.view));
    EXPECT_TRUE(all_finite(t.grad_k.view));
    EXPECT_TRUE(all_finite(t.grad_v.view));
    EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), tolerance_of(GetParam()));
    EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), tolerance_of(GetParam()));
    EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), tolerance_of(GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(CpuAttention, CpuAttentionDtype, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace attnkit::test
