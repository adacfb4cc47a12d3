// The contract the decay-matrix form keeps through the shared weighted-row code (retention_weighted_rows.hpp):
// a zero in the decay matrix masks the key for that query, so a key every query of a head masks changes neither
// the outputs nor the gradients of q and v even when its k (and, forward, its v) is not finite, and its own key
// gradient is exactly zero.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "attnkit/retention.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using retention_test::Buffer;
using retention_test::fill_random;
using retention_test::make_tensor;
using retention_test::poison_nan;
using retention_test::set;
using retention_test::set_backward_tensors;
using retention_test::values;

constexpr int64_t kBatch = 1, kTq = 7, kTk = 6, kHeads = 2, kDk = 5, kDv = 3;
constexpr int64_t kHead = 1, kKey = 2;  // head 1 masks key 2 for every query

RunOptions on_cpu() {
  RunOptions options;
  options.backend = Backend::cpu;
  return options;
}

struct Operands {
  Buffer q, k, v, decay, grad_out;

  explicit Operands(uint64_t seed) {
    q = make_tensor(DType::f64, {kBatch, kTq, kHeads, kDk});
    k = make_tensor(DType::f64, {kBatch, kTk, kHeads, kDk});
    v = make_tensor(DType::f64, {kBatch, kTk, kHeads, kDv});
    decay = make_tensor(DType::f64, {kHeads, kTq, kTk});
    grad_out = make_tensor(DType::f64, {kBatch, kTq, kHeads, kDv});
    fill_random(q, seed);
    fill_random(k, seed + 1);
    fill_random(v, seed + 2);
    fill_random(decay, seed + 3, 0.0, 1.0);
    fill_random(grad_out, seed + 4);
    for (int64_t t = 0; t < kTq; ++t) set(decay.view, (kHead * kTq + t) * kTk + kKey, 0.0);
  }

  void set_key(double value) {
    for (int64_t i = 0; i < kDk; ++i) set(k.view, ((0 * kTk + kKey) * kHeads + kHead) * kDk + i, value);
  }
  void set_value(double value) {
    for (int64_t j = 0; j < kDv; ++j) set(v.view, ((0 * kTk + kKey) * kHeads + kHead) * kDv + j, value);
  }

  std::vector<double> forward(bool normalize) const {
    Buffer out = make_tensor(DType::f64, {kBatch, kTq, kHeads, kDv});
    poison_nan(out);
    RetentionForward p;
    p.q = q.view;
    p.k = k.view;
    p.v = v.view;
    p.out = out.view;
    p.mode = RetentionMode::parallel;
    p.decay = decay.view;
    p.normalize = normalize;
    p.scale = 2.0;  // row sums of |score| above 1: the normaliser's clamp is active
    retention_forward(p, on_cpu());
    return values(out.view);
  }

  // {grad_q, grad_k, grad_v}
  std::vector<std::vector<double>> backward(bool normalize) const {
    Buffer gq = make_tensor(DType::f64, {kBatch, kTq, kHeads, kDk});
    Buffer gk = make_tensor(DType::f64, {kBatch, kTk, kHeads, kDk});
    Buffer gv = make_tensor(DType::f64, {kBatch, kTk, kHeads, kDv});
    poison_nan(gq);
    poison_nan(gk);
    poison_nan(gv);
    RetentionBackward p;
    set_backward_tensors(p, q.view, k.view, v.view, grad_out.view, gq.view, gk.view, gv.view);
    p.mode = RetentionMode::parallel;
    p.decay = decay.view;
    p.normalize = normalize;
    p.scale = 2.0;
    retention_backward(p, on_cpu());
    return {values(gq.view), values(gk.view), values(gv.view)};
  }
};

int64_t masked_key_grad_index(int64_t i) { return ((0 * kTk + kKey) * kHeads + kHead) * kDk + i; }

TEST(RetentionWeightedRows, DecayMatrixZerosMaskNonFiniteKeysAndValuesInTheForward) {
  for (const bool normalize : {false, true}) {
    Operands finite(5);
    finite.set_key(0.25);
    finite.set_value(-0.5);
    Operands not_finite(5);
    not_finite.set_key(std::numeric_limits<double>::quiet_NaN());
    not_finite.set_value(std::numeric_limits<double>::infinity());
    EXPECT_EQ(not_finite.forward(normalize), finite.forward(normalize)) << "normalize " << normalize;
  }
}

TEST(RetentionWeightedRows, DecayMatrixZerosMaskNonFiniteKeysInTheBackward) {
  for (const bool normalize : {false, true}) {
    Operands finite(9);
    finite.set_key(0.25);
    Operands not_finite(9);
    not_finite.set_key(std::numeric_limits<double>::quiet_NaN());
    const auto expected = finite.backward(normalize);
    const auto got = not_finite.backward(normalize);
    EXPECT_EQ(got[0], expected[0]) << "grad_q, normalize " << normalize;
    EXPECT_EQ(got[2], expected[2]) << "grad_v, normalize " << normalize;
    ASSERT_EQ(got[1].size(), expected[1].size());
    for (std::size_t i = 0; i < got[1].size(); ++i) EXPECT_EQ(got[1][i], expected[1][i]) << "grad_k " << i;
    for (int64_t i = 0; i < kDk; ++i) EXPECT_EQ(got[1][masked_key_grad_index(i)], 0.0);
  }
}

}  // namespace
}  // namespace attnkit
