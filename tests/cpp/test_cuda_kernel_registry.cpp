// The CUDA kernel registries against the kernel table they are generated from (cmake/attnkit_kernels.cmake,
// written out as attnkit/generated/fmha_kernel_list.hpp): one entry per generated row, in table order, each
// named by its row — the config id the factory's config yields (fmha_config_name /
// fmha_backward_config_name) is the row's id, and the entry function is named mechanically from it — and
// the Hopper entries of a (dtype, head dim, policy) come before the portable ones, since the default is
// the first entry that fits. Host only: building the registries launches nothing, so these run without a
// GPU; without CUDA every test skips.
#include <gtest/gtest.h>

#if defined(ATTNKIT_WITH_CUDA)
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/generated/fmha_kernel_list.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaKernelRegistry, SkipsWithoutCuda) { GTEST_SKIP() << "this build has no CUDA backend"; }

#else

struct GeneratedRow {
  std::string function;
  std::string id;
};

std::vector<GeneratedRow> forward_rows() {
  return {
#define ATTNKIT_TEST_ROW(function, id) {#function, id},
      ATTNKIT_FMHA_FORWARD_KERNELS(ATTNKIT_TEST_ROW)
#undef ATTNKIT_TEST_ROW
  };
}

std::vector<GeneratedRow> backward_rows() {
  return {
#define ATTNKIT_TEST_ROW(function, id) {#function, id},
      ATTNKIT_FMHA_BACKWARD_KERNELS(ATTNKIT_TEST_ROW)
#undef ATTNKIT_TEST_ROW
  };
}

TEST(CudaKernelRegistry, ForwardEntriesAreTheGeneratedRowsInTableOrder) {
  const auto& kernels = cuda::fmha::fmha_forward_kernels();
  const std::vector<GeneratedRow> rows = forward_rows();
  ASSERT_EQ(kernels.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(cuda::fmha::fmha_config_name(kernels[i].config), rows[i].id)
        << "entry " << i << " (" << rows[i].function
        << "): the table row's numbers differ from what its factory builds";
  }
}

TEST(CudaKernelRegistry, BackwardEntriesAreTheGeneratedRowsInTableOrder) {
  const auto& kernels = cuda::fmha::fmha_backward_kernels();
  const std::vector<GeneratedRow> rows = backward_rows();
  ASSERT_EQ(kernels.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(cuda::fmha::fmha_backward_config_name(kernels[i].config), rows[i].id)
        << "entry " << i << " (" << rows[i].function
        << "): the table row's numbers differ from what its factory builds";
  }
}

TEST(CudaKernelRegistry, EntryFunctionsAreNamedForTheirConfigIds) {
  for (const GeneratedRow& row : forward_rows()) EXPECT_EQ(row.function, "fmha_forward_" + row.id);
  for (const GeneratedRow& row : backward_rows()) {
    ASSERT_EQ(row.id.rfind("bwd_", 0), 0u) << row.id;
    EXPECT_EQ(row.function, "fmha_backward_" + row.id.substr(4));
  }
}

TEST(CudaKernelRegistry, ConfigIdsAreUnique) {
  std::set<std::string> ids;
  for (const GeneratedRow& row : forward_rows()) EXPECT_TRUE(ids.insert(row.id).second) << row.id;
  for (const GeneratedRow& row : backward_rows()) EXPECT_TRUE(ids.insert(row.id).second) << row.id;
}

// On a 9.0 device both tiers fit; the registries' default is the first that does, which must be Hopper's.
TEST(CudaKernelRegistry, HopperEntriesPrecedePortableOnesOfTheSameProblem) {
  std::set<std::tuple<DType, int, int> > portable_seen;
  for (const auto& kernel : cuda::fmha::fmha_forward_kernels()) {
    const auto key =
        std::make_tuple(kernel.config.dtype, kernel.config.head_dim, static_cast<int>(kernel.config.policy));
    if (kernel.config.architecture == 80) portable_seen.insert(key);
    if (kernel.config.architecture == 90) {
      EXPECT_EQ(portable_seen.count(key), 0u) << cuda::fmha::fmha_config_name(kernel.config);
    }
  }
  portable_seen.clear();
  for (const auto& kernel : cuda::fmha::fmha_backward_kernels()) {
    const auto key =
        std::make_tuple(kernel.config.dtype, kernel.config.head_dim, static_cast<int>(kernel.config.policy));
    if (kernel.config.architecture == 80) portable_seen.insert(key);
    if (kernel.config.architecture == 90) {
      EXPECT_EQ(portable_seen.count(key), 0u) << cuda::fmha::fmha_backward_config_name(kernel.config);
    }
  }
}

TEST(CudaKernelRegistry, SetMacrosDescribeTheCompiledRows) {
  bool forward_sm90 = false;
  for (const auto& kernel : cuda::fmha::fmha_forward_kernels()) forward_sm90 |= kernel.config.architecture == 90;
  bool backward_sm90 = false;
  for (const auto& kernel : cuda::fmha::fmha_backward_kernels()) backward_sm90 |= kernel.config.architecture == 90;
  EXPECT_EQ(forward_sm90, ATTNKIT_FMHA_SM90 == 1);
  EXPECT_EQ(backward_sm90, ATTNKIT_FMHA_SM90_BACKWARD == 1);
  bool head_dim_256 = false;  // a full-set-only width
  for (const auto& kernel : cuda::fmha::fmha_forward_kernels()) head_dim_256 |= kernel.config.head_dim == 256;
  EXPECT_EQ(head_dim_256, ATTNKIT_FMHA_FULL_SET == 1);
}

#endif

}  // namespace
}  // namespace attnkit
