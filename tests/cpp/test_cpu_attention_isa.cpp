// Every instruction-set build of the CPU attention kernels (baseline, AVX2, AVX-512) that this
// machine can run matches the brute-force reference, so a machine with wide vectors still tests
// the baseline code path, and the choice of set can be forced or rejected with a clear message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "cpu/attention_isa.hpp"
#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

using cpu::CpuIsa;

// Forces an instruction set for the scope of a test.
class ForcedIsa {
 public:
  explicit ForcedIsa(CpuIsa isa) { cpu::force_attention_cpu_isa(isa); }
  ~ForcedIsa() { cpu::force_attention_cpu_isa(std::nullopt); }
  ForcedIsa(const ForcedIsa&) = delete;
  ForcedIsa& operator=(const ForcedIsa&) = delete;
};

std::vector<AttentionCase> isa_cases(DType dtype) {
  std::vector<AttentionCase> cases(4);
  for (AttentionCase& c : cases) {
    c.dtype = dtype;
    c.head_dim = 24;
    c.head_dim_v = 40;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.strided = true;
  }
  cases[0].tokens = {37};
  cases[1].tokens = {29};
  cases[1].tokens_kv = {33};
  cases[1].mask = causal_mask(CausalAlignment::bottom_right);
  cases[2].tokens = {13, 17};
  cases[2].mask = neighborhood_mask({5, 6}, {2, 1}, {1, 2}, {false, true});
  cases[3].tokens = {5, 6, 7};
  cases[3].mask = neighborhood_mask({3, 3, 5}, {1, 2, 1});
  return cases;
}

class CpuAttentionIsa : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_isa_supported(GetParam())) {
      GTEST_SKIP() << "instruction set " << cpu::cpu_isa_name(GetParam()) << " is not supported by this CPU";
    }
  }
};

TEST_P(CpuAttentionIsa, Float64ForwardAndBackwardMatchBruteForce) {
  ForcedIsa forced(GetParam());
  for (const AttentionCase& c : isa_cases(DType::f64)) {
    AttentionTensors t(c);
    t.run_forward();
    t.run_backward();
    t.run_reference_forward();
    t.run_reference_backward();
    EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), 1e-12);
    EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), 1e-7);
    EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), 1e-12);
    EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), 1e-12);
    EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), 1e-12);
  }
}

TEST_P(CpuAttentionIsa, Float32ForwardAndBackwardMatchBruteForce) {
  ForcedIsa forced(GetParam());
  for (const AttentionCase& c : isa_cases(DType::f32)) {
    AttentionTensors t(c);
    t.run_forward();
    t.run_backward();
    t.run_reference_forward();
    t.run_reference_backward();
    EXPECT_TRUE(all_finite(t.out.view));
    EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), 1e-5);
    EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), 1e-5);
    EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), 1e-5);
    EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(CpuAttention, CpuAttentionIsa,
                         ::testing::Values(CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(cpu::cpu_isa_name(info.param));
                         });

TEST(CpuAttentionIsaChoice, UnknownInstructionSetNameIsRejectedWithTheAllowedNames) {
  const char* previous = std::getenv("ATTNKIT_CPU_ISA");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("ATTNKIT_CPU_ISA", "sse9", 1);
  try {
    (void)cpu::attention_cpu_isa();
    ADD_FAILURE() << "expected attnkit::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), Status::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("'sse9'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("baseline, avx2, avx512"), std::string::npos) << error.what();
  }
  if (previous != nullptr) {
    setenv("ATTNKIT_CPU_ISA", saved.c_str(), 1);
  } else {
    unsetenv("ATTNKIT_CPU_ISA");
  }
}

TEST(CpuAttentionIsaChoice, BaselineIsAlwaysSupported) {
  EXPECT_TRUE(cpu::cpu_isa_supported(CpuIsa::baseline));
  ForcedIsa forced(CpuIsa::baseline);
  EXPECT_EQ(cpu::attention_cpu_isa(), CpuIsa::baseline);
}

}  // namespace
}  // namespace attnkit::test
