// Problem keys and their bucketing of varying sizes (DESIGN §6.6).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "test_tune_support.hpp"
#include "tune/extent_bucket.hpp"
#include "tune/problem_key.hpp"

namespace attnkit::tune {
namespace {

TEST(TuneBucketing, AThousandRandomLengthsMapToFewBuckets) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<int64_t> length(1, 65536);
  std::set<int64_t> lengths;
  std::set<int64_t> buckets;
  for (int i = 0; i < 1000; ++i) {
    const int64_t n = length(rng);
    lengths.insert(n);
    buckets.insert(bucket_extent(n));
  }
  EXPECT_GT(lengths.size(), 950u);
  EXPECT_LE(buckets.size(), 60u);  // 8 exact + 4 per octave above 8
}

TEST(TuneBucketing, ABucketIsAtLeastTheLengthAndAtMostAQuarterAbove) {
  for (int64_t n = 1; n <= 100000; n += (n < 300 ? 1 : 37)) {
    const int64_t b = bucket_extent(n);
    ASSERT_GE(b, n) << n;
    if (n <= 8)
      ASSERT_EQ(b, n);
    else
      ASSERT_LE(static_cast<double>(b), 1.25 * static_cast<double>(n)) << n;
    ASSERT_EQ(bucket_extent(b), b) << "a bucket's representative is its own bucket";
  }
}

TEST(TuneBucketing, LengthsInOneBucketShareAKey) {
  const ProblemKey a = make_problem_key(testing::test_problem(1000));
  const ProblemKey b = make_problem_key(testing::test_problem(1010));
  const ProblemKey c = make_problem_key(testing::test_problem(1100));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_FALSE(a == c);
  EXPECT_EQ(a.spec.tokens[0], 1024);
}

TEST(TuneBucketing, BatchIsBucketedButHeadsAreNot) {
  ProblemSpec spec = testing::test_problem(512);
  spec.batch = 3;
  ProblemSpec other = spec;
  other.heads_q = 16;
  EXPECT_EQ(make_problem_key(spec).spec.batch, 3);
  spec.batch = 11;
  ProblemSpec twelve = spec;
  twelve.batch = 12;
  EXPECT_EQ(make_problem_key(spec), make_problem_key(twelve));
  EXPECT_FALSE(make_problem_key(spec) == make_problem_key(other));
}

TEST(TuneBucketing, KeyTextIsCanonicalAndReadable) {
  ProblemSpec na = testing::test_problem(1);
  na.token_dims = 2;
  na.tokens = na.tokens_kv = {56, 56, 1};
  na.mask = MaskKind::neighborhood;
  na.neighborhood[0] = NeighborhoodDim{7, 2, 1, false};
  na.neighborhood[1] = NeighborhoodDim{7, 1, 3, true};
  EXPECT_EQ(make_problem_key(na).text,
            "attention_fwd float16 b=2 hq=8 hkv=2 d=64 dv=64 q=56x56 kv=56x56 mask=neighborhood k=7x7 dil=2x1 "
            "st=1x3 causal=0x1");
}

TEST(TuneBucketing, DensityRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(density_bucket(1.0), 0);
  EXPECT_EQ(density_bucket(0.6), 0);
  EXPECT_EQ(density_bucket(0.5), 1);
  EXPECT_EQ(density_bucket(0.3), 1);
  EXPECT_EQ(density_bucket(1e-9), 10);
  ProblemSpec sparse = testing::test_problem(1024);
  sparse.mask = MaskKind::element;
  sparse.density = 0.3;
  ProblemSpec denser = sparse;
  denser.density = 0.45;
  EXPECT_EQ(make_problem_key(sparse), make_problem_key(denser));
  EXPECT_DOUBLE_EQ(make_problem_key(sparse).spec.density, 0.5);
}

TEST(TuneBucketing, FieldsIrrelevantToTheMaskDoNotSplitKeys) {
  ProblemSpec a = testing::test_problem(256);
  a.mask = MaskKind::none;
  ProblemSpec b = a;
  b.causal_alignment = CausalAlignment::bottom_right;  // meaningless without a causal mask
  b.neighborhood[0].kernel_size = 9;                   // meaningless without a neighborhood mask
  EXPECT_EQ(make_problem_key(a), make_problem_key(b));
}

}  // namespace
}  // namespace attnkit::tune
