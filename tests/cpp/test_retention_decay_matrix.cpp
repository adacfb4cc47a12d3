// Retention's parallel form over an explicit decay matrix [H|1, Tq, Tk] (RetentionForward::decay) on the CPU
// backend: against its literal definition in float64 with Tq != Tk, against the gamma forms when the matrix
// holds gamma's powers (with and without normalize), gradients against central differences of the
// definition, shared versus per-head matrices, Tk = 0, and the validation messages of what it allows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/retention.hpp"
#include "retention_test_support.hpp"

namespace attnkit {
namespace {

using retention_test::Buffer;
using retention_test::fill_random;
using retention_test::get;
using retention_test::make_tensor;
using retention_test::poison_nan;
using retention_test::relative_l2;
using retention_test::set;
using retention_test::set_backward_tensors;
using retention_test::values;

RunOptions on_cpu() {
  RunOptions options;
  options.backend = Backend::cpu;
  return options;
}

struct Gradients {
  Buffer q, k, v;
};

struct DecayProblem {
  int64_t batch = 2, tq = 5, tk = 9, heads = 2, dk = 4, dv = 3;
  DType dtype = DType::f64;
  bool shared = false;  // decay [1, Tq, Tk] instead of [H, Tq, Tk]
  bool normalize = false;
  double scale = 0.5;
  Buffer q, k, v, decay;

  void make(uint64_t seed) {
    q = make_tensor(dtype, {batch, tq, heads, dk});
    k = make_tensor(dtype, {batch, tk, heads, dk});
    v = make_tensor(dtype, {batch, tk, heads, dv});
    decay = make_tensor(dtype, {shared ? 1 : heads, tq, tk});
    fill_random(q, seed);
    fill_random(k, seed + 1);
    fill_random(v, seed + 2);
    fill_random(decay, seed + 3, 0.0, 1.0);
    // Zeros in the matrix: every third entry (those keys do not count for that query).
    for (int64_t i = 0; i < decay.numel(); i += 3) set(decay.view, i, 0.0);
  }

  RetentionForward forward(const TensorView& out) const {
    RetentionForward p;
    p.q = q.view;
    p.k = k.view;
    p.v = v.view;
    p.out = out;
    p.mode = RetentionMode::parallel;
    p.decay = decay.view;
    p.normalize = normalize;
    p.scale = scale;
    return p;
  }

  // Gradient buffers of the operands' shapes.
  Gradients gradients() const {
    return {make_tensor(dtype, {batch, tq, heads, dk}), make_tensor(dtype, {batch, tk, heads, dk}),
            make_tensor(dtype, {batch, tk, heads, dv})};
  }

  // The parallel backward over the decay matrix, into `grad`.
  RetentionBackward backward(const Buffer& grad_out, const Gradients& grad) const {
    RetentionBackward p;
    set_backward_tensors(p, q.view, k.view, v.view, grad_out.view, grad.q.view, grad.k.view, grad.v.view);
    p.mode = RetentionMode::parallel;
    p.decay = decay.view;
    p.normalize = normalize;
    p.scale = scale;
    return p;
  }

  // out[b, t, h, j] = sum_m s[t, m] / n_t v[b, m, h, j], s = scale * D[h, t, m] (q_t . k_m), literally.
  std::vector<double> definition(const std::vector<double>& qs, const std::vector<double>& ks) const {
    std::vector<double> out(static_cast<std::size_t>(batch * tq * heads * dv), 0.0);
    const std::vector<double> vs = values(v.view), ds = values(decay.view);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = 0; t < tq; ++t) {
          std::vector<double> s(static_cast<std::size_t>(tk), 0.0);
          double abs_sum = 0.0;
          for (int64_t m = 0; m < tk; ++m) {
            double qk = 0.0;
            for (int64_t i = 0; i < dk; ++i) {
              qk += qs[((b * tq + t) * heads + h) * dk + i] * ks[((b * tk + m) * heads + h) * dk + i];
            }
            s[m] = scale * ds[((shared ? 0 : h) * tq + t) * tk + m] * qk;
            abs_sum += std::abs(s[m]);
          }
          const double n = normalize ? std::max(abs_sum, 1.0) : 1.0;
          for (int64_t j = 0; j < dv; ++j) {
            double sum = 0.0;
            for (int64_t m = 0; m < tk; ++m) sum += s[m] / n * vs[((b * tk + m) * heads + h) * dv + j];
            out[((b * tq + t) * heads + h) * dv + j] = sum;
          }
        }
      }
    }
    return out;
  }
};

std::vector<double> run_forward(const DecayProblem& d) {
  Buffer out = make_tensor(d.dtype, {d.batch, d.tq, d.heads, d.dv});
  poison_nan(out);
  retention_forward(d.forward(out.view), on_cpu());
  return values(out.view);
}

TEST(RetentionDecayMatrix, MatchesItsDefinitionWithFewerQueriesThanKeys) {
  for (const bool normalize : {false, true}) {
    for (const bool shared : {false, true}) {
      DecayProblem d;
      d.normalize = normalize;
      d.shared = shared;
      d.scale = normalize ? 2.0 : 0.5;  // row sums of |score| above 1, so that the clamp is active
      d.make(11);
      EXPECT_LE(relative_l2(run_forward(d), d.definition(values(d.q.view), values(d.k.view))), 1e-12)
          << "normalize " << normalize << " shared " << shared;
    }
  }
}

TEST(RetentionDecayMatrix, MoreQueriesThanKeysAndKeysOfZeroWeight) {
  DecayProblem d;
  d.tq = 12;
  d.tk = 4;
  d.make(21);
  for (int64_t t = 0; t < d.tq; ++t) set(d.decay.view, (1 * d.tq + t) * d.tk + 2, 0.0);  // head 1 ignores key 2
  EXPECT_LE(relative_l2(run_forward(d), d.definition(values(d.q.view), values(d.k.view))), 1e-12);
}

// The matrix gamma^(t-m) (m <= t) reproduces the per-head gamma form; with rows divided by sqrt(row sum) and
// normalize, RetNet's normalised form.
TEST(RetentionDecayMatrix, GammaPowersReproduceTheGammaForms) {
  const std::vector<double> gamma{0.9, 0.6};
  for (const bool normalize : {false, true}) {
    DecayProblem d;
    d.dtype = DType::f32;
    d.tq = d.tk = 37;
    d.dk = 16;
    d.dv = 8;
    d.normalize = normalize;
    d.make(31);
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t t = 0; t < d.tq; ++t) {
        double row_sum = 0.0;
        for (int64_t m = 0; m <= t; ++m) row_sum += std::pow(gamma[h], static_cast<double>(t - m));
        for (int64_t m = 0; m < d.tk; ++m) {
          const double power = m <= t ? std::pow(gamma[h], static_cast<double>(t - m)) : 0.0;
          set(d.decay.view, (h * d.tq + t) * d.tk + m, normalize ? power / std::sqrt(row_sum) : power);
        }
      }
    }
    Buffer expected = make_tensor(d.dtype, {d.batch, d.tq, d.heads, d.dv});
    RetentionForward gamma_form = d.forward(expected.view);
    gamma_form.decay = TensorView{};
    gamma_form.gamma = gamma;
    retention_forward(gamma_form, on_cpu());
    EXPECT_LE(relative_l2(run_forward(d), values(expected.view)), 1e-5) << "normalize " << normalize;

    // Gradients alike.
    Buffer grad_out = make_tensor(d.dtype, {d.batch, d.tq, d.heads, d.dv});
    fill_random(grad_out, 41);
    std::vector<std::vector<double>> grads[2];
    for (int form = 0; form < 2; ++form) {
      const Gradients grad = d.gradients();
      RetentionBackward p = d.backward(grad_out, grad);
      if (form == 1) {
        p.decay = TensorView{};
        p.gamma = gamma;
      }
      retention_backward(p, on_cpu());
      grads[form] = {values(grad.q.view), values(grad.k.view), values(grad.v.view)};
    }
    for (int g = 0; g < 3; ++g) EXPECT_LE(relative_l2(grads[0][g], grads[1][g]), 1e-5) << "gradient " << g;
  }
}

// dL/dq and dL/dk of L = sum(out * G) against central differences of the definition; dL/dv is linear in v.
TEST(RetentionDecayMatrix, GradientsMatchCentralDifferencesOfTheDefinition) {
  for (const bool normalize : {false, true}) {
    DecayProblem d;
    d.tq = 4;
    d.tk = 6;
    d.heads = 1;
    d.batch = 1;
    d.normalize = normalize;
    d.scale = normalize ? 3.0 : 0.7;
    d.make(51);
    Buffer grad_out = make_tensor(d.dtype, {d.batch, d.tq, d.heads, d.dv});
    fill_random(grad_out, 61);
    const std::vector<double> g = values(grad_out.view);
    Gradients grad = d.gradients();
    poison_nan(grad.q), poison_nan(grad.k), poison_nan(grad.v);
    retention_backward(d.backward(grad_out, grad), on_cpu());

    auto loss = [&](const std::vector<double>& qs, const std::vector<double>& ks) {
      const std::vector<double> out = d.definition(qs, ks);
      double sum = 0.0;
      for (std::size_t i = 0; i < out.size(); ++i) sum += out[i] * g[i];
      return sum;
    };
    std::vector<double> qs = values(d.q.view), ks = values(d.k.view);
    // dL/dx by central differences, x being qs or ks (perturbed in place, then restored).
    auto central_differences = [&](std::vector<double>& x) {
      const double h = 1e-6;
      std::vector<double> numeric(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = loss(qs, ks);
        x[i] = keep - h;
        numeric[i] = (up - loss(qs, ks)) / (2 * h);
        x[i] = keep;
      }
      return numeric;
    };
    const std::vector<double> numeric_q = central_differences(qs);
    const std::vector<double> numeric_k = central_differences(ks);
    EXPECT_LE(relative_l2(values(grad.q.view), numeric_q), 1e-6) << "normalize " << normalize;
    EXPECT_LE(relative_l2(values(grad.k.view), numeric_k), 1e-6) << "normalize " << normalize;
    // dv[m] = sum_t s[t, m] / n_t G_t: the definition with v replaced by unit vectors, summed against G.
    std::vector<double> expected_v(static_cast<std::size_t>(d.tk * d.dv), 0.0);
    for (int64_t m = 0; m < d.tk; ++m) {
      for (int64_t j = 0; j < d.dv; ++j) {
        Buffer saved = make_tensor(d.dtype, {d.batch, d.tk, d.heads, d.dv});
        for (int64_t i = 0; i < saved.numel(); ++i) set(saved.view, i, get(d.v.view, i));
        for (int64_t i = 0; i < d.v.numel(); ++i) set(d.v.view, i, i == m * d.dv + j ? 1.0 : 0.0);
        expected_v[m * d.dv + j] = loss(qs, ks);
        for (int64_t i = 0; i < saved.numel(); ++i) set(d.v.view, i, get(saved.view, i));
      }
    }
    EXPECT_LE(relative_l2(values(grad.v.view), expected_v), 1e-12) << "normalize " << normalize;
  }
}

TEST(RetentionDecayMatrix, NoKeysGiveZeroOutputs) {
  DecayProblem d;
  d.tk = 0;
  d.make(71);
  const std::vector<double> out = run_forward(d);
  ASSERT_EQ(out.size(), static_cast<std::size_t>(d.batch * d.tq * d.heads * d.dv));
  for (const double x : out) EXPECT_EQ(x, 0.0);
}

std::string forward_error(const RetentionForward& p) {
  try {
    retention_forward(p, on_cpu());
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    return e.what();
  }
  return "no error";
}

TEST(RetentionDecayMatrix, ValidationSaysWhatIsAllowed) {
  DecayProblem d;
  d.make(81);
  Buffer out = make_tensor(d.dtype, {d.batch, d.tq, d.heads, d.dv});

  RetentionForward chunked = d.forward(out.view);
  chunked.mode = RetentionMode::chunkwise;
  EXPECT_NE(forward_error(chunked).find("allowed: mode=parallel"), std::string::npos) << forward_error(chunked);

  RetentionForward with_gamma = d.forward(out.view);
  with_gamma.gamma = {0.9, 0.8};
  EXPECT_NE(forward_error(with_gamma).find("the matrix replaces gamma"), std::string::npos);

  Buffer state = make_tensor(DType::f64, {d.batch, d.heads, d.dk, d.dv});
  RetentionForward with_state = d.forward(out.view);
  with_state.final_state = state.view;
  EXPECT_NE(forward_error(with_state).find("no final_state with decay"), std::string::npos)
      << forward_error(with_state);

  Buffer wrong_rows = make_tensor(d.dtype, {d.heads, d.tq + 1, d.tk});
  RetentionForward bad_shape = d.forward(out.view);
  bad_shape.decay = wrong_rows.view;
  EXPECT_NE(forward_error(bad_shape).find("[H|1, Tq, Tk]"), std::string::npos) << forward_error(bad_shape);

  Buffer three_heads = make_tensor(d.dtype, {3, d.tq, d.tk});
  RetentionForward bad_heads = d.forward(out.view);
  bad_heads.decay = three_heads.view;
  EXPECT_NE(forward_error(bad_heads).find("allowed: 1 (shared)"), std::string::npos) << forward_error(bad_heads);

  Buffer half = make_tensor(DType::f16, {d.heads, d.tq, d.tk});
  RetentionForward bad_dtype = d.forward(out.view);
  bad_dtype.decay = half.view;
  EXPECT_NE(forward_error(bad_dtype).find("allowed: float32 or q's dtype"), std::string::npos)
      << forward_error(bad_dtype);

  RetentionForward unequal_without_matrix = d.forward(out.view);
  unequal_without_matrix.decay = TensorView{};
  EXPECT_NE(forward_error(unequal_without_matrix).find("q's shape"), std::string::npos)
      << forward_error(unequal_without_matrix);
}

}  // namespace
}  // namespace attnkit
