// Numerical robustness of attention on hard inputs (docs/reliability.md, "Numerical robustness"):
// logits of magnitude 1e4, all-equal scores, fp16 values near the top of its range, long sequences,
// rows without keys under every mask kind that allows them, and NaN / infinity in the inputs.
//
// Every test runs on the CPU backend and, in CUDA builds with a GPU, on the CUDA backend (fp16 / bf16
// there; a problem the GPU kernels do not cover is skipped with the library's reason). Inputs are
// built on the host; results are compared with the float64 reference of the CPU backend
// (cpu/attention_reference.hpp, whose backward takes the library's out and LSE) or with closed
// forms, by DESIGN §5's relative L2 tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "cpu/attention_reference.hpp"
#include "cuda_test_support.hpp"
#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kFp16Max = 65504.0;
// LSE is fp32 in both. The GPU sums its exponentials (ex2.approx) in fp32 over up to 131072 keys here:
// 3e-6 measured on an H200, hence its looser bound.
double lse_tolerance(Backend backend) { return backend == Backend::cuda ? 1e-5 : 1e-6; }

double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-5;
    case DType::f16: return 5e-3;
    case DType::bf16: return 1.5e-2;
    default: return 1e-12;
  }
}

// ---- running a problem on either backend -------------------------------------------------------

#if defined(ATTNKIT_WITH_CUDA)
// A device copy of everything a host view spans (padding included), and the same view on it.
struct DeviceCopy {
  TensorView host, device;
  DeviceBuffer memory;
  std::size_t bytes = 0;

  explicit DeviceCopy(const TensorView& view) : host(view), device(view) {
    if (!view.defined()) return;
    int64_t span = 1;
    for (int32_t d = 0; d < view.rank; ++d) span += (view.extents[d] - 1) * view.strides[d];
    bytes = static_cast<std::size_t>(span) * dtype_size(view.dtype);
    memory = DeviceBuffer(bytes);
    device.data = memory.data();
    device.device = Device{DeviceType::cuda, 0};
    expect_cuda(cudaMemcpy(memory.data(), view.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  void download() const {
    if (host.defined()) expect_cuda(cudaMemcpy(host.data, memory.data(), bytes, cudaMemcpyDeviceToHost), "D2H");
  }
};
#endif

// Runs the forward (out, lse) or backward (grad_q, grad_k, grad_v) of `t` on `backend`, outputs
// poisoned with NaN first. Returns "", or why this build's backend cannot run the problem.
std::string run(AttentionTensors& t, Backend backend, bool backward) {
  try {
    if (backend == Backend::cpu) {
      backward ? t.run_backward() : t.run_forward();
      return "";
    }
#if defined(ATTNKIT_WITH_CUDA)
    std::vector<std::unique_ptr<DeviceCopy>> copies;
    auto to_device = [&](std::initializer_list<TensorView*> views) {
      for (TensorView* view : views) {
        copies.push_back(std::make_unique<DeviceCopy>(*view));
        *view = copies.back()->device;
      }
    };
    RunOptions options;
    options.backend = Backend::cuda;
    if (backward) {
      for (const HostTensor* g : {&t.grad_q, &t.grad_k, &t.grad_v}) poison_nan(g->view);
      AttentionBackward p = t.backward_problem();
      to_device({&p.q, &p.k, &p.v, &p.out, &p.lse, &p.grad_out, &p.grad_q, &p.grad_k, &p.grad_v});
      to_device({&p.mask.block_mask, &p.mask.element_mask});
      attention_backward(p, options);
    } else {
      poison_nan(t.out.view), poison_nan(t.lse.view);
      AttentionForward p = t.forward_problem();
      to_device({&p.q, &p.k, &p.v, &p.out, &p.lse, &p.mask.block_mask, &p.mask.element_mask});
      attention_forward(p, options);
    }
    expect_cuda(cudaDeviceSynchronize(), "attention on the GPU");
    for (const auto& copy : copies) copy->download();  // inputs come back as they were
    return "";
#else
    return "this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
#endif
  } catch (const Error& e) {
    if (e.status() == Status::unsupported) return std::string("the backend answers unsupported: ") + e.what();
    throw;
  }
}

#define RUN_OR_SKIP(call)                                                  \
  do {                                                                     \
    if (const std::string why = (call); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

class NumericalRobustness : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() != Backend::cuda) return;
#if defined(ATTNKIT_WITH_CUDA)
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device visible (the CUDA cases run on a GPU machine)";
#else
    GTEST_SKIP() << "this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
#endif
  }
  // The dtypes of `wanted` that this backend runs: the CUDA kernels take fp16 and bf16.
  std::vector<DType> dtypes(std::vector<DType> wanted) const {
    if (GetParam() == Backend::cuda) std::erase_if(wanted, [](DType d) { return d != DType::f16 && d != DType::bf16; });
    return wanted;
  }
  std::string forward(AttentionTensors& t) const { return run(t, GetParam(), false); }
  std::string backward(AttentionTensors& t) const { return run(t, GetParam(), true); }
  double lse_tol() const { return lse_tolerance(GetParam()); }
};

const std::vector<DType> kAllDtypes{DType::f64, DType::f32, DType::f16, DType::bf16};

// ---- element access and comparisons -------------------------------------------------------------

// Row (b, token, head) of a [B, S, H, X] view, or the one value of a [B, S, H] view.
std::vector<double> row_of(const TensorView& view, int64_t b, int64_t token, int64_t head) {
  if (view.rank == 3) return {element_at(view, {b, token, head})};
  std::vector<double> row(static_cast<std::size_t>(view.extents[3]));
  for (int64_t x = 0; x < view.extents[3]; ++x) row[x] = element_at(view, {b, token, head, x});
  return row;
}

bool has_nan(const std::vector<double>& values) {
  return std::any_of(values.begin(), values.end(), [](double x) { return std::isnan(x); });
}

// Relative L2 error of rows [first, last) of (batch b, head h); equal values (infinities) count as 0.
double slice_error(const TensorView& a, const TensorView& ref, int64_t b, int64_t h, int64_t first, int64_t last) {
  double error = 0.0, norm = 0.0;
  for (int64_t i = first; i < last; ++i) {
    const std::vector<double> x = row_of(a, b, i, h), y = row_of(ref, b, i, h);
    for (std::size_t c = 0; c < x.size(); ++c) {
      if (x[c] != y[c]) error += (x[c] - y[c]) * (x[c] - y[c]);
      if (std::isfinite(y[c])) norm += y[c] * y[c];
    }
  }
  return norm == 0.0 ? std::sqrt(error) : std::sqrt(error / norm);
}

void fill_each(const TensorView& view, const std::function<double(const std::vector<int64_t>&)>& value) {
  std::vector<int64_t> index(static_cast<std::size_t>(view.rank), 0);
  for (int64_t n = 0; n < view.numel(); ++n) {
    int64_t rest = n;
    for (int32_t d = view.rank - 1; d >= 0; --d) index[d] = rest % view.extents[d], rest /= view.extents[d];
    set_element(view, index, value(index));
  }
}

void expect_forward_near_reference(AttentionTensors& t, double tolerance, double lse_tolerance) {
  t.run_reference_forward();
  EXPECT_TRUE(all_finite(t.out.view)) << "output not finite or not written";
  EXPECT_TRUE(all_finite(t.lse.view)) << "LSE not finite or not written";
  EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), tolerance);
  EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), lse_tolerance);
}

void expect_backward_near_reference(AttentionTensors& t, double tolerance) {
  t.run_reference_backward();
  for (const HostTensor* g : {&t.grad_q, &t.grad_k, &t.grad_v}) EXPECT_TRUE(all_finite(g->view));
  EXPECT_LE(relative_l2(t.grad_q.view, t.ref_grad_q.view), tolerance);
  EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), tolerance);
  EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), tolerance);
}

AttentionCase case_of(DType dtype, std::vector<int64_t> tokens, AttentionMask mask, uint64_t seed,
                      std::vector<int64_t> tokens_kv = {}) {
  AttentionCase c;
  c.dtype = dtype;
  c.tokens = std::move(tokens);
  c.tokens_kv = std::move(tokens_kv);
  c.head_dim = 16;  // scale 1/4, exact in every dtype
  c.mask = mask;
  c.seed = seed;
  return c;
}

// ---- large logits --------------------------------------------------------------------------------

// q = (+-2496 x 8, a/8 x 8), k = (2 x 8, b/8 x 8) with integers |a|, |b| <= 8: every score is +-9984
// plus a spread of about 1, exact in every dtype and in the fp32 accumulator. A softmax without its
// max subtraction overflows (e^9984) or divides 0 by 0 (e^-9984).
void fill_large_offsets(AttentionTensors& t) {
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> eighths(-8, 8);
  fill_each(t.q.view, [&](const std::vector<int64_t>& i) {
    return i[3] < 8 ? ((i[1] + i[2]) % 2 == 0 ? 2496.0 : -2496.0) : eighths(rng) / 8.0;
  });
  fill_each(t.k.view, [&](const std::vector<int64_t>& i) { return i[3] < 8 ? 2.0 : eighths(rng) / 8.0; });
}

TEST_P(NumericalRobustness, LogitsOfMagnitude1e4GiveFiniteExactForwardAndBackward) {
  for (DType dtype : dtypes(kAllDtypes)) {
    for (const AttentionMask& mask : {AttentionMask{}, causal_mask()}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (mask.kind == MaskKind::causal ? " causal" : " dense"));
      AttentionTensors t(case_of(dtype, {67}, mask, 5));
      fill_large_offsets(t);
      RUN_OR_SKIP(forward(t));
      expect_forward_near_reference(t, tolerance_of(dtype), lse_tol());
      EXPECT_NEAR(std::abs(element_at(t.lse.view, {0, 0, 0})), 9984.0, 5.0);
      RUN_OR_SKIP(backward(t));
      expect_backward_near_reference(t, tolerance_of(dtype));
    }
  }
}

// What rounding the scores costs the probabilities, relative: |score| * eps * sqrt(D) in the
// accumulator (fp32 for fp32/fp16/bf16 inputs), |score| bounded by |LSE| for peaked rows (needs the
// reference forward). With arbitrary fp32 inputs at |score| = 1e4 that is 3e-3, above fp32's 1e-5:
// conditioning, not overflow.
double score_rounding(const AttentionTensors& t) {
  double largest = 0.0;
  for (double x : to_doubles(t.ref_lse.view)) largest = std::isfinite(x) ? std::max(largest, std::abs(x)) : largest;
  const double epsilon = t.spec.dtype == DType::f64 ? 0x1p-53 : 0x1p-24;
  return largest * epsilon * std::sqrt(static_cast<double>(t.spec.head_dim));
}

// q, k uniform in +-100: |logits| up to about 1e4 with as large a spread, rows close to one-hot.
TEST_P(NumericalRobustness, RandomLogitsOfMagnitude1e4MatchTheReference) {
  for (DType dtype : dtypes(kAllDtypes)) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionTensors t(case_of(dtype, {67}, AttentionMask{}, 7));
    std::mt19937_64 rng(23);
    fill_random(t.q.view, rng, -100.0, 100.0);
    fill_random(t.k.view, rng, -100.0, 100.0);
    RUN_OR_SKIP(forward(t));
    expect_forward_near_reference(t, tolerance_of(dtype), lse_tol());
    // dV (a sum of probabilities) matches; dQ and dK of near one-hot rows are rounding noise around
    // 0, so only their finiteness means something.
    RUN_OR_SKIP(backward(t));
    t.run_reference_backward();
    for (const HostTensor* g : {&t.grad_q, &t.grad_k, &t.grad_v}) EXPECT_TRUE(all_finite(g->view));
    EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), std::max(tolerance_of(dtype), score_rounding(t)));
  }
}

// ---- all-equal scores ------------------------------------------------------------------------------

// Equal scores in every row: the output is the plain mean of the attended values and the LSE is
// log(count) + the common score (common[(b * S + i) * H + h]).
void expect_mean_of_attended_values(const AttentionTensors& t, const std::vector<double>& common, double tolerance,
                                    double lse_tolerance) {
  const int64_t sq = t.shape().seq_q, sk = t.shape().seq_k, heads = t.spec.heads_q;
  double error = 0.0, norm = 0.0, lse_error = 0.0;
  for (int64_t b = 0; b < t.spec.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<uint8_t> visible = cpu::reference::explicit_attention_mask(t.spec.mask, t.shape(), b, h);
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> mean(static_cast<std::size_t>(t.spec.head_dim_v), 0.0);
        double count = 0.0;
        for (int64_t j = 0; j < sk; ++j) {
          if (!visible[i * sk + j]) continue;
          count += 1.0;
          for (std::size_t x = 0; x < mean.size(); ++x) mean[x] += element_at(t.v.view, {b, j, h, int64_t(x)});
        }
        const double lse = std::log(count) + common[(b * sq + i) * heads + h];
        lse_error = std::max(lse_error, std::abs(row_of(t.lse.view, b, i, h)[0] - lse) / std::max(1.0, std::abs(lse)));
        const std::vector<double> out = row_of(t.out.view, b, i, h);
        for (std::size_t x = 0; x < mean.size(); ++x) {
          error += (out[x] - mean[x] / count) * (out[x] - mean[x] / count), norm += mean[x] * mean[x] / count / count;
        }
      }
    }
  }
  EXPECT_LE(std::sqrt(error / norm), tolerance) << "output is not the mean of the attended values";
  EXPECT_LE(lse_error, lse_tolerance) << "LSE is not log(count) + the common score";
}

// Dense, causal (1 to 37 keys per row) and a random element mask with its diagonal set.
std::vector<AttentionMask> equal_score_masks(HostTensor& element_mask) {
  std::mt19937_64 rng(41);
  fill_random_bool(element_mask.view, rng, 0.3);
  for (int64_t i = 0; i < element_mask.view.extents[2]; ++i) set_element(element_mask.view, {0, 0, i, i}, 1.0);
  return {AttentionMask{}, causal_mask(), element_sparse_mask(element_mask.view)};
}

TEST_P(NumericalRobustness, ZeroQueriesGiveTheMeanOfTheAttendedValues) {
  HostTensor element_mask = HostTensor::contiguous(DType::boolean, {1, 1, 37, 37});
  for (DType dtype : dtypes(kAllDtypes)) {
    for (const AttentionMask& mask : equal_score_masks(element_mask)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", mask kind " + std::to_string(static_cast<int>(mask.kind)));
      AttentionTensors t(case_of(dtype, {37}, mask, 9));
      fill_value(t.q.view, 0.0);
      RUN_OR_SKIP(forward(t));
      expect_mean_of_attended_values(t, std::vector<double>(2 * 37 * 2, 0.0), tolerance_of(dtype), lse_tol());
      RUN_OR_SKIP(backward(t));
      expect_backward_near_reference(t, tolerance_of(dtype));
      // dK = scale * sum_i dS_ij q_i with every q_i = 0.
      for (double x : to_doubles(t.grad_k.view)) ASSERT_EQ(x, 0.0);
    }
  }
}

TEST_P(NumericalRobustness, ConstantKeysGiveTheMeanOfTheAttendedValues) {
  HostTensor element_mask = HostTensor::contiguous(DType::boolean, {1, 1, 37, 37});
  for (DType dtype : dtypes(kAllDtypes)) {
    for (const AttentionMask& mask : equal_score_masks(element_mask)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", mask kind " + std::to_string(static_cast<int>(mask.kind)));
      AttentionTensors t(case_of(dtype, {37}, mask, 9));
      // k_j = c_h for every key: row i's scores all equal scale * q_i . c_h.
      fill_each(t.k.view, [](const std::vector<int64_t>& i) { return 0.25 * double((i[3] + i[2]) % 5) - 0.5; });
      std::vector<double> common;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < 37; ++i) {
          for (int64_t h = 0; h < 2; ++h) {
            const std::vector<double> q = row_of(t.q.view, b, i, h), c = row_of(t.k.view, b, 0, h);
            common.push_back(std::inner_product(q.begin(), q.end(), c.begin(), 0.0) / 4.0);
          }
        }
      }
      RUN_OR_SKIP(forward(t));
      expect_mean_of_attended_values(t, common, tolerance_of(dtype), lse_tol());
      // dQ = scale * c * sum_j dS_ij is 0 up to rounding, so not compared relatively; dK, dV are.
      RUN_OR_SKIP(backward(t));
      t.run_reference_backward();
      for (const HostTensor* g : {&t.grad_q, &t.grad_k, &t.grad_v}) EXPECT_TRUE(all_finite(g->view));
      EXPECT_LE(relative_l2(t.grad_k.view, t.ref_grad_k.view), tolerance_of(dtype));
      EXPECT_LE(relative_l2(t.grad_v.view, t.ref_grad_v.view), tolerance_of(dtype));
    }
  }
}

// ---- fp16 values near the top of the range ---------------------------------------------------------

TEST_P(NumericalRobustness, Fp16ValuesNearTheRangeLimitGiveAnOutputInRange) {
  AttentionTensors t(case_of(DType::f16, {37}, causal_mask(), 11));
  std::mt19937_64 rng(51);
  std::uniform_real_distribution<double> magnitude(3e4, kFp16Max);
  fill_each(t.v.view, [&](const std::vector<int64_t>& i) { return (i[3] % 2 ? -1.0 : 1.0) * magnitude(rng); });
  fill_random(t.grad_out.view, rng, -1e-2, 1e-2);
  RUN_OR_SKIP(forward(t));
  expect_forward_near_reference(t, tolerance_of(DType::f16), lse_tol());
  RUN_OR_SKIP(backward(t));
  expect_backward_near_reference(t, tolerance_of(DType::f16));
}

TEST_P(NumericalRobustness, Fp16MeanOfTheLargestFiniteValueIsExactlyThatValue) {
  AttentionTensors t(case_of(DType::f16, {37}, causal_mask(), 13));
  fill_each(t.v.view, [](const std::vector<int64_t>& i) { return i[2] == 0 ? kFp16Max : -kFp16Max; });
  RUN_OR_SKIP(forward(t));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 37; ++i) {
      for (double x : row_of(t.out.view, b, i, 0)) ASSERT_EQ(x, kFp16Max) << "row " << i;
      for (double x : row_of(t.out.view, b, i, 1)) ASSERT_EQ(x, -kFp16Max) << "row " << i;
    }
  }
}

// q, k of magnitude 1e4 to 3e4 in fp16: logits near 1e9, far beyond fp16, ordinary in fp32. The CUDA
// kernels' documented limit (docs/reliability.md, "Numerical robustness"): their exponent
// FFMA(s, c, -round(m * c)) leaves the rounding of m * c (up to 2^6 at 1e9) in every probability of the
// row, which overflows P once it is converted to fp16 for the P.V product; that case is CPU-only.
TEST_P(NumericalRobustness, Fp16LogitsBeyondTheFp16RangeKeepTheLseFinite) {
  if (GetParam() == Backend::cuda) {
    GTEST_SKIP() << "documented limit of the CUDA kernels: scores beyond ~1e8 lose the exponent's precision "
                    "(docs/reliability.md, Numerical robustness)";
  }
  AttentionTensors t(case_of(DType::f16, {37}, AttentionMask{}, 15));
  std::mt19937_64 rng(53);
  std::uniform_real_distribution<double> magnitude(1e4, 3e4);
  std::bernoulli_distribution negative(0.5);
  for (const HostTensor* x : {&t.q, &t.k}) {
    fill_each(x->view, [&](const std::vector<int64_t>&) { return (negative(rng) ? -1.0 : 1.0) * magnitude(rng); });
  }
  RUN_OR_SKIP(forward(t));
  expect_forward_near_reference(t, tolerance_of(DType::f16), lse_tol());
}

// ---- long sequences --------------------------------------------------------------------------------

// Decoding against a long KV cache (bottom-right causal): every row sums 32k (GPU: 128k) exponentials
// and values, forward and backward, within the dtype's tolerance.
TEST_P(NumericalRobustness, LongSequencesAccumulateWithinTolerance) {
  for (DType dtype : dtypes({DType::f32, DType::f16, DType::bf16})) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t keys = GetParam() == Backend::cpu ? 32768 : 131072;
    AttentionCase c = case_of(dtype, {5}, causal_mask(CausalAlignment::bottom_right), 61, {keys});
    c.batch = 1, c.heads_q = c.heads_kv = 1;
    AttentionTensors t(c);
    RUN_OR_SKIP(forward(t));
    expect_forward_near_reference(t, tolerance_of(dtype), lse_tol());
    RUN_OR_SKIP(backward(t));
    expect_backward_near_reference(t, tolerance_of(dtype));
  }
}

// ---- rows without keys -----------------------------------------------------------------------------

// DESIGN §3: a row that attends no key gives output 0 and LSE -inf and gets zero gradients; a key that
// no row attends gets zero gradients; nothing is NaN; every other row matches the reference.
struct RowsWithoutKeys {
  std::string name;
  int64_t seq_q, seq_k;
  AttentionMask mask;
  std::vector<int64_t> rows, keys;  // the rows without keys, the keys nobody attends
};

TEST_P(NumericalRobustness, RowsWithoutKeysGiveZerosMinusInfinityAndZeroGradients) {
  std::mt19937_64 rng(73);
  // Element mask: queries 3 and 20 see nothing, key 5 is seen by nobody.
  HostTensor elements = HostTensor::contiguous(DType::boolean, {2, 2, 23, 29});
  fill_random_bool(elements.view, rng, 0.5);
  fill_each(elements.view, [&](const std::vector<int64_t>& i) {
    return i[2] == 3 || i[2] == 20 || i[3] == 5 ? 0.0 : element_at(elements.view, i);
  });
  // Block mask, 4 x 5 blocks over 19 x 23: block row 1 (queries 4-7) and column 2 (keys 10-14) empty.
  HostTensor blocks = HostTensor::contiguous(DType::boolean, {1, 2, 5, 5});
  fill_random_bool(blocks.view, rng, 0.7);
  fill_each(blocks.view,
            [&](const std::vector<int64_t>& i) { return i[2] == 1 || i[3] == 2 ? 0.0 : element_at(blocks.view, i); });
  HostTensor nothing = HostTensor::contiguous(DType::boolean, {1, 1, 11, 14});
  fill_value(nothing.view, 0.0);
  std::vector<int64_t> all_rows(11), all_keys(14);
  std::iota(all_rows.begin(), all_rows.end(), 0), std::iota(all_keys.begin(), all_keys.end(), 0);
  const std::vector<RowsWithoutKeys> cases{
      {"element mask", 23, 29, element_sparse_mask(elements.view), {3, 20}, {5}},
      {"block mask", 19, 23, block_sparse_mask(blocks.view, 4, 5), {4, 5, 6, 7}, {10, 11, 12, 13, 14}},
      // Sq = 13 > Sk = 9: query i sees keys [0, i - 4], so queries 0-3 see none.
      {"bottom-right causal", 13, 9, causal_mask(CausalAlignment::bottom_right), {0, 1, 2, 3}, {}},
      {"all-false element mask", 11, 14, element_sparse_mask(nothing.view), all_rows, all_keys}};
  for (DType dtype : dtypes(kAllDtypes)) {
    for (const RowsWithoutKeys& m : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + m.name);
      AttentionTensors t(case_of(dtype, {m.seq_q}, m.mask, 71, {m.seq_k}));
      RUN_OR_SKIP(forward(t));
      RUN_OR_SKIP(backward(t));
      t.run_reference_forward();
      EXPECT_TRUE(all_finite(t.out.view));
      EXPECT_FALSE(any_nan(t.lse.view));
      EXPECT_LE(relative_l2(t.out.view, t.ref_out.view), tolerance_of(dtype));
      EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), lse_tol());
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t i : m.rows) {
            EXPECT_EQ(row_of(t.lse.view, b, i, h)[0], -kInf) << "row " << i;
            for (double x : row_of(t.out.view, b, i, h)) EXPECT_EQ(x, 0.0) << "row " << i;
            for (double x : row_of(t.grad_q.view, b, i, h)) EXPECT_EQ(x, 0.0) << "row " << i;
          }
          for (int64_t j : m.keys) {
            for (double x : row_of(t.grad_k.view, b, j, h)) EXPECT_EQ(x, 0.0) << "key " << j;
            for (double x : row_of(t.grad_v.view, b, j, h)) EXPECT_EQ(x, 0.0) << "key " << j;
          }
        }
      }
      expect_backward_near_reference(t, tolerance_of(dtype));
    }
  }
}

// ---- NaN and infinity in the inputs ------------------------------------------------------------------

// One non-finite value at token 30 of (batch 0, head 0) of a causal problem of 40 tokens. On every
// backend: the rows that depend on it are not finite (a NaN is never dropped silently), and the
// other (batch, head) slices match the reference. The CPU backend pins more, test by test.
constexpr int64_t kPoisoned = 30;

void expect_other_slices_clean(const TensorView& a, const TensorView& ref, double tolerance) {
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 2; ++h) {
      if (b != 0 || h != 0) {
        EXPECT_LE(slice_error(a, ref, b, h, 0, 40), tolerance) << "slice " << b << ", " << h;
      }
    }
  }
}

TEST_P(NumericalRobustness, NaNInAKeyReachesTheRowsThatAttendItAndNoOtherSlice) {
  for (DType dtype : dtypes(kAllDtypes)) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionTensors t(case_of(dtype, {40}, causal_mask(), 83));
    set_element(t.k.view, {0, kPoisoned, 0, 3}, kNaN);
    RUN_OR_SKIP(forward(t));
    t.run_reference_forward();
    for (int64_t i = kPoisoned; i < 40; ++i) EXPECT_TRUE(has_nan(row_of(t.out.view, 0, i, 0))) << "row " << i;
    expect_other_slices_clean(t.out.view, t.ref_out.view, tolerance_of(dtype));
    expect_other_slices_clean(t.lse.view, t.ref_lse.view, lse_tol());
    if (GetParam() == Backend::cpu) {
      // Its LSE is NaN too; rows that do not attend the key never read its score (unvisited
      // scores are set to -inf before the exponential).
      for (int64_t i = kPoisoned; i < 40; ++i) EXPECT_TRUE(std::isnan(row_of(t.lse.view, 0, i, 0)[0])) << "row " << i;
      EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, 0, kPoisoned), tolerance_of(dtype));
      EXPECT_LE(slice_error(t.lse.view, t.ref_lse.view, 0, 0, 0, kPoisoned), lse_tol());
    }
    RUN_OR_SKIP(backward(t));
    t.run_reference_backward();
    expect_other_slices_clean(t.grad_q.view, t.ref_grad_q.view, tolerance_of(dtype));
    expect_other_slices_clean(t.grad_k.view, t.ref_grad_k.view, tolerance_of(dtype));
    expect_other_slices_clean(t.grad_v.view, t.ref_grad_v.view, tolerance_of(dtype));
  }
}

TEST_P(NumericalRobustness, NaNInAQueryReachesItsRowOnly) {
  for (DType dtype : dtypes(kAllDtypes)) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionTensors t(case_of(dtype, {40}, causal_mask(), 83));
    set_element(t.q.view, {0, kPoisoned, 0, 3}, kNaN);
    RUN_OR_SKIP(forward(t));
    t.run_reference_forward();
    EXPECT_TRUE(has_nan(row_of(t.out.view, 0, kPoisoned, 0)));
    if (GetParam() == Backend::cpu) {
      // Not mistaken for a row without keys (which would be 0 and -inf): its LSE is NaN.
      EXPECT_TRUE(std::isnan(row_of(t.lse.view, 0, kPoisoned, 0)[0]));
    }
    EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, 0, kPoisoned), tolerance_of(dtype));
    EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, kPoisoned + 1, 40), tolerance_of(dtype));
    expect_other_slices_clean(t.out.view, t.ref_out.view, tolerance_of(dtype));
    RUN_OR_SKIP(backward(t));
    t.run_reference_backward();
    EXPECT_TRUE(has_nan(row_of(t.grad_q.view, 0, kPoisoned, 0)));
    EXPECT_LE(slice_error(t.grad_q.view, t.ref_grad_q.view, 0, 0, 0, kPoisoned), tolerance_of(dtype));
    expect_other_slices_clean(t.grad_q.view, t.ref_grad_q.view, tolerance_of(dtype));
    expect_other_slices_clean(t.grad_k.view, t.ref_grad_k.view, tolerance_of(dtype));
  }
}

TEST_P(NumericalRobustness, NaNInAValueLeavesEveryLseFinite) {
  for (DType dtype : dtypes(kAllDtypes)) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionTensors t(case_of(dtype, {40}, causal_mask(), 83));
    set_element(t.v.view, {0, kPoisoned, 0, 3}, kNaN);
    RUN_OR_SKIP(forward(t));
    t.run_reference_forward();
    EXPECT_TRUE(all_finite(t.lse.view));
    EXPECT_LE(relative_l2(t.lse.view, t.ref_lse.view), lse_tol());
    for (int64_t i = kPoisoned; i < 40; ++i) EXPECT_TRUE(has_nan(row_of(t.out.view, 0, i, 0))) << "row " << i;
    expect_other_slices_clean(t.out.view, t.ref_out.view, tolerance_of(dtype));
    if (GetParam() == Backend::cpu) {
      // The rows of the key's first 4-row tile that do not attend it still multiply its NaN by a
      // zero weight (docs/reliability.md); rows of earlier tiles are exact.
      EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, 0, kPoisoned - 4), tolerance_of(dtype));
    }
    RUN_OR_SKIP(backward(t));
    t.run_reference_backward();
    EXPECT_TRUE(all_finite(t.grad_v.view)) << "dV = sum_i P_ij dO_i does not read V";
    expect_other_slices_clean(t.grad_q.view, t.ref_grad_q.view, tolerance_of(dtype));
    expect_other_slices_clean(t.grad_k.view, t.ref_grad_k.view, tolerance_of(dtype));
  }
}

// k[30] holds -inf in one component: its score is -inf for queries whose component is positive (the
// key is ignored, as if masked) and +inf for row 35, whose component is negative (NaN: inf - inf).
TEST_P(NumericalRobustness, AnInfiniteKeyComponentIsIgnoredOrGivesNaN) {
  constexpr int64_t kNegativeRow = 35;
  for (DType dtype : dtypes(kAllDtypes)) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionTensors t(case_of(dtype, {40}, causal_mask(), 83));
    set_element(t.k.view, {0, kPoisoned, 0, 3}, -kInf);
    for (int64_t i = 0; i < 40; ++i) set_element(t.q.view, {0, i, 0, 3}, i == kNegativeRow ? -0.75 : 0.5 + 0.01 * i);
    RUN_OR_SKIP(forward(t));
    t.run_reference_forward();
    EXPECT_TRUE(has_nan(row_of(t.out.view, 0, kNegativeRow, 0)));
    if (GetParam() == Backend::cpu) {
      EXPECT_TRUE(std::isnan(row_of(t.lse.view, 0, kNegativeRow, 0)[0]));
    }
    EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, 0, kNegativeRow), tolerance_of(dtype));
    EXPECT_LE(slice_error(t.lse.view, t.ref_lse.view, 0, 0, 0, kNegativeRow), lse_tol());
    EXPECT_LE(slice_error(t.out.view, t.ref_out.view, 0, 0, kNegativeRow + 1, 40), tolerance_of(dtype));
    expect_other_slices_clean(t.out.view, t.ref_out.view, tolerance_of(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(NumericalRobustness, NumericalRobustness, ::testing::Values(Backend::cpu, Backend::cuda),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(backend_name(info.param));
                         });

}  // namespace
}  // namespace attnkit::test
