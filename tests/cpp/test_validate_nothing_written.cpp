// DESIGN §4: when validation fails, no output is touched. Each test poisons its outputs with a NaN
// bit pattern, calls the public entry point with a problem that breaks one late rule (so that every
// earlier check has passed), and bit-compares the outputs afterwards.
#include <cstring>
#include <random>

#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

// A float buffer with random contents and its pristine bytes.
struct PoisonedBuffer {
  std::vector<float> values;
  std::vector<float> snapshot;
  explicit PoisonedBuffer(std::size_t count) : values(count) {
    const uint32_t poison = 0x7fc0dead;  // a quiet NaN no computation produces
    for (auto& v : values) {
      std::memcpy(&v, &poison, sizeof(v));
    }
    snapshot = values;
  }
  bool untouched() const { return std::memcmp(values.data(), snapshot.data(), values.size() * sizeof(float)) == 0; }
};

std::vector<float> random_floats(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (auto& v : values) {
    v = dist(rng);
  }
  return values;
}

TEST(ValidateNothingWritten, AttentionForwardLeavesOutputsPoisoned) {
  auto q = random_floats(1 * 7 * 9 * 2 * 4, 1);
  auto k = random_floats(q.size(), 2);
  auto v = random_floats(q.size(), 3);
  PoisonedBuffer out(q.size());
  PoisonedBuffer lse(1 * 7 * 9 * 2);
  AttentionForward p;
  p.q = make_view(q.data(), DType::f32, {1, 7, 9, 2, 4});
  p.k = make_view(k.data(), DType::f32, {1, 7, 9, 2, 4});
  p.v = make_view(v.data(), DType::f32, {1, 7, 9, 2, 4});
  p.out = make_view(out.values.data(), DType::f32, {1, 7, 9, 2, 4});
  p.lse = make_view(lse.values.data(), DType::f32, {1, 7, 9, 2});
  p.mask = neighborhood_mask({3, 5}, {3, 2});  // 5 * 2 = 10 > 9: the very last check fails
  EXPECT_THROW(attention_forward(p), Error);
  EXPECT_TRUE(out.untouched());
  EXPECT_TRUE(lse.untouched());
}

TEST(ValidateNothingWritten, AttentionBackwardLeavesGradientsPoisoned) {
  auto q = random_floats(2 * 11 * 2 * 8, 4);
  auto out = random_floats(q.size(), 5);
  auto grad_out = random_floats(q.size(), 6);
  auto lse = random_floats(2 * 11 * 2, 7);
  PoisonedBuffer grad_q(q.size()), grad_k(q.size()), grad_v(q.size());
  AttentionBackward p;
  p.q = p.k = p.v = make_view(q.data(), DType::f32, {2, 11, 2, 8});
  p.out = make_view(out.data(), DType::f32, {2, 11, 2, 8});
  p.grad_out = make_view(grad_out.data(), DType::f32, {2, 11, 2, 8});
  p.lse = make_view(lse.data(), DType::f32, {2, 11, 2});
  p.grad_q = make_view(grad_q.values.data(), DType::f32, {2, 11, 2, 8});
  p.grad_k = make_view(grad_k.values.data(), DType::f32, {2, 11, 2, 8});
  p.grad_v = make_view(grad_v.values.data(), DType::f32, {2, 11, 2, 8});
  p.scale = -1.0;
  EXPECT_THROW(attention_backward(p), Error);
  EXPECT_TRUE(grad_q.untouched());
  EXPECT_TRUE(grad_k.untouched());
  EXPECT_TRUE(grad_v.untouched());
}

TEST(ValidateNothingWritten, RetentionForwardLeavesOutputsPoisoned) {
  auto q = random_floats(1 * 13 * 2 * 4, 8);
  PoisonedBuffer out(q.size());
  PoisonedBuffer final_state(1 * 2 * 4 * 4);
  RetentionForward p;
  p.q = p.k = p.v = make_view(q.data(), DType::f32, {1, 13, 2, 4});
  p.out = make_view(out.values.data(), DType::f32, {1, 13, 2, 4});
  p.final_state = make_view(final_state.values.data(), DType::f32, {1, 2, 4, 4});
  p.mode = RetentionMode::chunkwise;
  p.normalize = true;  // not allowed with chunkwise
  EXPECT_THROW(retention_forward(p), Error);
  EXPECT_TRUE(out.untouched());
  EXPECT_TRUE(final_state.untouched());
}

TEST(ValidateNothingWritten, GemmLeavesOutputPoisoned) {
  auto a = random_floats(9 * 5, 9);
  auto b = random_floats(5 * 7, 10);
  PoisonedBuffer c(9 * 7);
  GemmProblem p;
  p.a = make_view(a.data(), DType::f32, {9, 5});
  p.b = make_view(b.data(), DType::f32, {5, 7});
  p.c = make_view(c.values.data(), DType::f32, {9, 7});
  p.beta = std::numeric_limits<double>::infinity();
  EXPECT_THROW(gemm(p), Error);
  EXPECT_TRUE(c.untouched());
}

}  // namespace
}  // namespace attnkit::test
