// The launch-parameter cache of the Hopper GEMM runners (cuda/gemm/gemm_params_cache.hpp), on the CPU with a
// stand-in for the kernel Params whose "descriptors" are the addresses they point at: Params are built once per
// workspace, alpha and beta; other operand addresses under a known key are patched in, never built; a patch
// reaches every descriptor whose address changed and no other; the entries are the 8 most recent keys.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "cuda/gemm/gemm_params_cache.hpp"

namespace attnkit::cuda::gemm {
namespace {

// What a Hopper runner's Params hold, reduced to what the cache must keep right: the addresses the A, B and C
// descriptors point at, and what they were built for.
struct FakeLaunch {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  const void* workspace = nullptr;
  float alpha = 0.0f, beta = 0.0f;
  int patched_descriptors = 0;
};

struct Harness {
  GemmParamsCache<FakeLaunch> cache;
  int builds = 0;

  FakeLaunch get(const GemmParamsKey& key, const GemmOperandAddresses& operands) {
    return cache.get(
        key, operands,
        [&] {
          ++builds;
          return FakeLaunch{operands.a, operands.b, operands.c, key.workspace, key.alpha, key.beta, 0};
        },
        [](FakeLaunch& l, const GemmOperandAddresses& from, const GemmOperandAddresses& to) {
          // The runner's patch: only descriptors whose address changed.
          if (from.a != to.a) l.a = to.a, ++l.patched_descriptors;
          if (from.b != to.b) l.b = to.b, ++l.patched_descriptors;
          if (from.c != to.c) l.c = to.c, ++l.patched_descriptors;
        });
  }
};

char buffers[64][256];

const void* at(int i) { return buffers[i]; }

TEST(GemmParamsCache, SameKeyWithNewOperandAddressesPatchesThemInWithoutBuilding) {
  Harness h;
  const GemmParamsKey key{at(0), 1.0f, 0.0f};
  (void)h.get(key, {at(1), at(2), at(3)});
  const FakeLaunch second = h.get(key, {at(4), at(5), at(6)});
  EXPECT_EQ(second.a, at(4));
  EXPECT_EQ(second.b, at(5));
  EXPECT_EQ(second.c, at(6));
  EXPECT_EQ(second.workspace, at(0));
  EXPECT_EQ(h.builds, 1);
  EXPECT_EQ(h.cache.builds(), 1);
  EXPECT_EQ(h.cache.patches(), 1);
}

TEST(GemmParamsCache, PatchTouchesOnlyTheDescriptorsWhoseAddressChanged) {
  Harness h;
  const GemmParamsKey key{nullptr, 1.0f, 0.0f};
  (void)h.get(key, {at(1), at(2), at(3)});
  const FakeLaunch only_c = h.get(key, {at(1), at(2), at(7)});
  EXPECT_EQ(only_c.patched_descriptors, 1);
  EXPECT_EQ(only_c.a, at(1));
  EXPECT_EQ(only_c.b, at(2));
  EXPECT_EQ(only_c.c, at(7));
}

TEST(GemmParamsCache, RepeatedAddressesAreNeitherBuiltNorPatched) {
  Harness h;
  const GemmParamsKey key{at(0), 2.0f, 0.5f};
  for (int i = 0; i < 5; ++i) {
    const FakeLaunch l = h.get(key, {at(1), at(2), at(3)});
    EXPECT_EQ(l.patched_descriptors, 0);
    EXPECT_EQ(l.c, at(3));
  }
  EXPECT_EQ(h.builds, 1);
  EXPECT_EQ(h.cache.patches(), 0);
}

TEST(GemmParamsCache, AlternatingOutputsPatchTheKeptParamsBackAndForth) {
  // A caller that allocates C per call from a caching allocator: two addresses in turn.
  Harness h;
  const GemmParamsKey key{at(0), 1.0f, 0.0f};
  for (int i = 0; i < 10; ++i) {
    const void* c = at(10 + i % 2);
    const FakeLaunch l = h.get(key, {at(1), at(2), c});
    EXPECT_EQ(l.c, c);
    EXPECT_EQ(l.a, at(1));
  }
  EXPECT_EQ(h.builds, 1);
  EXPECT_EQ(h.cache.patches(), 9);
}

TEST(GemmParamsCache, AnotherWorkspaceAlphaOrBetaIsBuiltNotPatched) {
  Harness h;
  (void)h.get({at(0), 1.0f, 0.0f}, {at(1), at(2), at(3)});
  const FakeLaunch workspace = h.get({at(9), 1.0f, 0.0f}, {at(1), at(2), at(3)});
  const FakeLaunch alpha = h.get({at(0), 2.0f, 0.0f}, {at(1), at(2), at(3)});
  const FakeLaunch beta = h.get({at(0), 1.0f, 1.0f}, {at(1), at(2), at(3)});
  EXPECT_EQ(h.builds, 4);
  EXPECT_EQ(workspace.workspace, at(9));
  EXPECT_EQ(alpha.alpha, 2.0f);
  EXPECT_EQ(beta.beta, 1.0f);
  EXPECT_EQ(h.cache.patches(), 0);
}

TEST(GemmParamsCache, AlphaAndBetaCompareBitwise) {
  Harness h;
  (void)h.get({nullptr, 1.0f, 0.0f}, {at(1), at(2), at(3)});
  (void)h.get({nullptr, 1.0f, -0.0f}, {at(1), at(2), at(3)});
  EXPECT_EQ(h.builds, 2);
  (void)h.get({nullptr, NAN, 0.0f}, {at(1), at(2), at(3)});
  (void)h.get({nullptr, NAN, 0.0f}, {at(1), at(2), at(3)});
  EXPECT_EQ(h.builds, 3);
}

TEST(GemmParamsCache, KeepsTheEightMostRecentKeys) {
  Harness h;
  const int keys = GemmParamsCache<FakeLaunch>::kEntries;
  for (int i = 0; i < keys; ++i) (void)h.get({at(20 + i), 1.0f, 0.0f}, {at(1), at(2), at(3)});
  for (int i = 0; i < keys; ++i) (void)h.get({at(20 + i), 1.0f, 0.0f}, {at(4), at(5), at(6)});
  EXPECT_EQ(h.builds, keys);
  (void)h.get({at(20 + keys), 1.0f, 0.0f}, {at(1), at(2), at(3)});  // a ninth key replaces the oldest
  EXPECT_EQ(h.builds, keys + 1);
  (void)h.get({at(20), 1.0f, 0.0f}, {at(1), at(2), at(3)});
  EXPECT_EQ(h.builds, keys + 2);
}

TEST(GemmParamsCache, AFailedPatchLeavesTheEntryAsItWas) {
  GemmParamsCache<FakeLaunch> cache;
  const GemmParamsKey key{nullptr, 1.0f, 0.0f};
  auto build = [&] { return FakeLaunch{at(1), at(2), at(3), nullptr, 1.0f, 0.0f, 0}; };
  auto patch = [](FakeLaunch& l, const GemmOperandAddresses&, const GemmOperandAddresses& to) {
    l.a = to.a;
    throw std::runtime_error("driver refused the address");
  };
  (void)cache.get(key, {at(1), at(2), at(3)}, build, patch);
  EXPECT_THROW((void)cache.get(key, {at(8), at(2), at(3)}, build, patch), std::runtime_error);
  const FakeLaunch kept = cache.get(key, {at(1), at(2), at(3)}, build, patch);
  EXPECT_EQ(kept.a, at(1));
  EXPECT_EQ(cache.builds(), 1);
}

}  // namespace
}  // namespace attnkit::cuda::gemm
