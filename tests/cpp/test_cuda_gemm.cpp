// GEMM on the CUDA backend against the CPU oracle (cpu/gemm_reference.hpp, in double): odd and
// degenerate sizes (M, N or K = 1, primes, K not a multiple of any tile, K = 0, alpha = 0 with NaN
// operands, empty C), both transposes, row- and column-major C, batched and broadcast batches, padded
// leading dimensions and misaligned views, alpha and beta, every dtype (fp32 exact and TF32). Every
// matrix lives inside a NaN-filled buffer: C's view is NaN before the call when beta is 0, the result
// must be finite and within DESIGN §5's relative L2 error, and every element around the views must
// still be NaN after it (an out-of-bounds read of A or B would make C NaN, a stray write shows in C's
// padding). Also: which kernel a plan runs (Hopper for bf16 / fp16 on a 9.0 device, split-K or stream-K
// for small grids, misaligned operands and N not a multiple of 8 staged into aligned copies, the SIMT
// fallback only for what no tensor-core row takes), the caller's workspace, a run replayed from a CUDA
// graph, runs from a thread with no CUDA context current, one plan run on many buffer sets, and a plan of device 1
// run while device 0 is current. Without CUDA (or a GPU) every test skips,
// except CudaGemmCanonicalForm and CudaGemmSelection, which need a CUDA build but no GPU (host memory, a
// described device).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/gemm.hpp"
#include "cpu/gemm_reference.hpp"
#include "cuda_test_support.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/float_convert.hpp"
#include "core/gemm_plan.hpp"
#include "core/zero_size.hpp"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_registry.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "cuda/gemm/gemm_split_k.hpp"
#include "cuda/gemm/gemm_staging.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaGemm, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using test::cuda_device_present;
using test::DeviceBuffer;
using test::expect_cuda;

// How a call computes: its dtype and, for fp32, whether TF32 is allowed.
struct Precision {
  DType dtype;
  bool allow_tf32;
  double tolerance;  // relative L2 (DESIGN §5)
  const char* name;
};

// TF32 (allow_tf32) is checked twice, because DESIGN §5's 3e-4 is a statistical bound, not a worst case:
// - on inputs that TF32 represents exactly (10 mantissa bits), the tensor cores' only error is the fp32
//   accumulation (a product of two TF32 values is exact in fp32), whatever rounding the kernel applies to
//   its operands: bound 1e-5, fp32's, on every problem — the check of the kernel's indexing and
//   accumulation;
// - on general fp32 inputs, the operands' rounding to TF32 gives each product a relative error of about
//   2.8e-4 rms (two operands, each rounded to nearest at 2^-11 ulp: uniform inputs give 2.6e-4, normal ones
//   2.9e-4, the same as cuBLAS's TF32), and the relative L2 over C is that rms estimated from the products
//   of the problem. 3e-4 is only about 7 % above the expectation, so it holds only where the estimate has
//   many samples: m * n * k >= 2^20 (relative spread below 0.1 %). Smaller problems are checked on the
//   exact inputs alone (a K = 8 problem of 512 products measured 3.08e-4).
constexpr int64_t kTf32StatisticalProducts = int64_t{1} << 20;
constexpr double kTf32ExactInputTolerance = 1e-5;

const Precision kF16{DType::f16, false, 5e-3, "f16"};
const Precision kBF16{DType::bf16, false, 1.5e-2, "bf16"};
const Precision kF32{DType::f32, false, 1e-5, "f32"};
const Precision kTF32{DType::f32, true, 3e-4, "f32_allow_tf32"};

// A [batch?, rows, cols] matrix inside a NaN-filled buffer. aligned: leading dimension and batch stride
// multiples of 8 elements, view at the buffer start (16-byte aligned for 16-bit types); else a leading
// dimension of extent + 1 and a view one element into the buffer.
struct MatrixSpec {
  int64_t batch = -1;  // -1: rank 2
  int64_t rows = 0, cols = 0;
  bool col_major = false;
  bool aligned = true;
  bool packed_batches = false;  // each batch right after the one before (else a gap of at least 8 elements)
};

struct DeviceMatrix {
  test::HostTensor buffer;  // the whole buffer, 1-D
  TensorView host;
  TensorView device;
  DeviceBuffer memory;
  int64_t offset = 0;
  std::vector<std::byte> initial;  // the buffer as made (download() overwrites `buffer` with the device's)

  void upload() const {
    expect_cuda(cudaMemcpy(memory.data(), buffer.view.data, buffer.storage.size(), cudaMemcpyHostToDevice), "H2D");
  }
  // The device buffer back to the values it was made with, whatever was downloaded since.
  void restore() const {
    expect_cuda(cudaMemcpy(memory.data(), initial.data(), initial.size(), cudaMemcpyHostToDevice), "H2D");
  }
  void download() {
    expect_cuda(cudaMemcpy(buffer.view.data, memory.data(), buffer.storage.size(), cudaMemcpyDeviceToHost), "D2H");
  }
  // Every element of the buffer outside the view is still NaN.
  bool padding_untouched() const {
    std::vector<char> in_view(static_cast<size_t>(buffer.view.numel()), 0);
    const auto* base = static_cast<const std::byte*>(buffer.view.data);
    const auto size = static_cast<int64_t>(dtype_size(host.dtype));
    const int64_t start = (static_cast<const std::byte*>(host.data) - base) / size;
    test::for_each_offset(host, [&](int64_t off) { in_view[static_cast<size_t>(start + off)] = 1; });
    for (size_t i = 0; i < in_view.size(); ++i) {
      if (!in_view[i] &&
          !std::isnan(detail::load_as_double(buffer.view.data, buffer.view.dtype, static_cast<int64_t>(i)))) {
        return false;
      }
    }
    return true;
  }
};

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Rounds every fp32 element of `view` to a value TF32 represents exactly (its low 13 mantissa bits cleared).
void round_to_tf32(const TensorView& view) {
  test::for_each_offset(view, [&](int64_t off) {
    float& x = static_cast<float*>(view.data)[off];
    uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof(bits));
    bits &= ~uint32_t{0x1fff};
    std::memcpy(&x, &bits, sizeof(bits));
  });
}

// fill: random values in the view (else NaN); tf32_exact: values TF32 represents exactly (fp32 only).
DeviceMatrix make_matrix(DType dtype, const MatrixSpec& s, bool fill, std::mt19937_64& rng, bool tf32_exact = false) {
  DeviceMatrix m;
  const int64_t inner = s.col_major ? s.rows : s.cols;
  const int64_t outer = s.col_major ? s.cols : s.rows;
  const int64_t ld = s.aligned ? round_up(std::max<int64_t>(inner, 1), 8) : inner + 1;
  const int64_t batch_stride = s.packed_batches ? ld * outer : s.aligned ? round_up(ld * outer + 8, 8) : ld * outer + 3;
  m.offset = s.aligned ? 0 : 1;
  const int64_t total = m.offset + std::max<int64_t>(s.batch, 1) * batch_stride + 8;
  m.buffer = test::HostTensor::contiguous(dtype, {total});
  test::poison_nan(m.buffer.view);
  m.host = m.buffer.view;
  m.host.data = static_cast<std::byte*>(m.buffer.view.data) + m.offset * static_cast<int64_t>(dtype_size(dtype));
  const int64_t row_stride = s.col_major ? 1 : ld;
  const int64_t col_stride = s.col_major ? ld : 1;
  if (s.batch < 0) {
    m.host.rank = 2;
    m.host.extents = {s.rows, s.cols};
    m.host.strides = {row_stride, col_stride};
  } else {
    m.host.rank = 3;
    m.host.extents = {s.batch, s.rows, s.cols};
    m.host.strides = {batch_stride, row_stride, col_stride};
  }
  if (fill) test::fill_random(m.host, rng, -1.0, 1.0);
  if (fill && tf32_exact && dtype == DType::f32) round_to_tf32(m.host);
  m.initial = m.buffer.storage;
  m.memory = DeviceBuffer(m.buffer.storage.size());
  m.device = m.host;
  m.device.data = static_cast<std::byte*>(m.memory.data()) + m.offset * static_cast<int64_t>(dtype_size(dtype));
  m.device.device = Device{DeviceType::cuda, 0};
  m.upload();
  return m;
}

struct GemmSpec {
  int64_t m = 1, n = 1, k = 1;
  bool transpose_a = false, transpose_b = false;
  bool a_col_major = false, b_col_major = false, c_col_major = false;
  int64_t batch_a = -1, batch_b = -1, batch_c = -1;  // -1: rank 2
  bool aligned = true;
  bool packed_batches = false;  // batches without gaps (a batch sharing B then folds into M: fold_broadcast_batch)
  double alpha = 1.0, beta = 0.0;
  bool nan_operands = false;  // A and B NaN (alpha == 0 or k == 0 must not read them)

  std::string describe() const {
    std::ostringstream s;
    s << "m=" << m << " n=" << n << " k=" << k << " ta=" << transpose_a << " tb=" << transpose_b
      << " a_col=" << a_col_major << " b_col=" << b_col_major << " c_col=" << c_col_major << " batches=(" << batch_a
      << "," << batch_b << "," << batch_c << ") aligned=" << aligned << " packed_batches=" << packed_batches
      << " alpha=" << alpha << " beta=" << beta;
    return s.str();
  }
};

struct GemmRun {
  DeviceMatrix a, b, c;
  GemmProblem problem;        // device views
  test::HostTensor expected;  // f64 [batch?, m, n]
  TensorView expected_view;
};

// tf32_exact: A and B hold values TF32 represents exactly (see kTf32StatisticalProducts). with_reference: compute the
// oracle's C (else `expected` stays empty: for a problem only planned).
GemmRun prepare(const GemmSpec& s, const Precision& precision, uint64_t seed, bool tf32_exact = false,
                bool with_reference = true) {
  std::mt19937_64 rng(seed);
  GemmRun run;
  const DType dtype = precision.dtype;
  run.a = make_matrix(
      dtype,
      {s.batch_a, s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k, s.a_col_major, s.aligned, s.packed_batches},
      !s.nan_operands, rng, tf32_exact);
  run.b = make_matrix(
      dtype,
      {s.batch_b, s.transpose_b ? s.n : s.k, s.transpose_b ? s.k : s.n, s.b_col_major, s.aligned, s.packed_batches},
      !s.nan_operands, rng, tf32_exact);
  run.c = make_matrix(dtype, {s.batch_c, s.m, s.n, s.c_col_major, s.aligned, s.packed_batches}, s.beta != 0.0, rng);
  run.problem.a = run.a.device;
  run.problem.b = run.b.device;
  run.problem.c = run.c.device;
  run.problem.transpose_a = s.transpose_a;
  run.problem.transpose_b = s.transpose_b;
  run.problem.alpha = s.alpha;
  run.problem.beta = s.beta;
  run.problem.allow_tf32 = precision.allow_tf32;
  if (!with_reference) return run;

  std::vector<int64_t> extents(run.c.host.extents.begin(), run.c.host.extents.begin() + run.c.host.rank);
  run.expected = test::HostTensor::contiguous(DType::f64, extents);
  run.expected_view = run.expected.view;
  // The oracle starts from C as it is before the call (NaN where beta is 0: it is not read then).
  std::vector<double> initial = test::to_doubles(run.c.host);
  auto* out = static_cast<double*>(run.expected.view.data);
  for (size_t i = 0; i < initial.size(); ++i) out[i] = initial[i];
  GemmProblem reference = run.problem;
  reference.a = run.a.host;
  reference.b = run.b.host;
  reference.c = run.expected_view;
  cpu::reference::gemm(reference);
  return run;
}

// Runs the call on the GPU and checks C against the oracle within `tolerance`, finiteness and the untouched
// padding.
void expect_within(const GemmSpec& s, const Precision& precision, uint64_t seed, bool tf32_exact, double tolerance) {
  SCOPED_TRACE(std::string(precision.name) + (tf32_exact ? " (TF32-exact inputs)" : "") + " " + s.describe());
  GemmRun run = prepare(s, precision, seed, tf32_exact);
  ASSERT_NO_THROW(gemm(run.problem));
  expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  run.c.download();
  EXPECT_TRUE(run.c.padding_untouched()) << "an element outside C's view was written";
  if (detail::has_no_elements(run.c.host)) return;
  ASSERT_FALSE(test::any_nan(run.c.host)) << "C holds NaN after the call";
  double reference_norm = 0.0;
  for (double x : test::to_doubles(run.expected_view)) reference_norm += x * x;
  if (reference_norm == 0.0) {
    EXPECT_EQ(test::max_abs_difference(run.c.host, run.expected_view), 0.0);
  } else {
    EXPECT_LE(test::relative_l2(run.c.host, run.expected_view), tolerance);
  }
}

// The oracle check of DESIGN §5 for the precision; TF32 as kTf32StatisticalProducts explains.
void expect_matches_oracle(const GemmSpec& s, const Precision& precision, uint64_t seed = 1) {
  if (!precision.allow_tf32) {
    expect_within(s, precision, seed, false, precision.tolerance);
    return;
  }
  expect_within(s, precision, seed, true, kTf32ExactInputTolerance);
  const int64_t batch = std::max<int64_t>({s.batch_a, s.batch_b, s.batch_c, 1});
  if (s.m * s.n * s.k * batch >= kTf32StatisticalProducts && !s.nan_operands) {
    expect_within(s, precision, seed, false, precision.tolerance);
  }
}

std::string plan_kernel(const GemmSpec& s, const Precision& precision) {
  GemmRun run = prepare(s, precision, 7);
  return detail::gemm_plan(run.problem, RunOptions{})->config().name;
}

int device_capability() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}

// The canonical form (cuda/gemm/gemm_shape.hpp) computed on the host, one element at a time through its
// strides and pointers: C[l, i, j] = alpha * sum_p A[l, i, p] B[l, p, j] + beta * C, C row-major.
void canonical_gemm_on_host(const cuda::gemm::GemmShape& s, double alpha, double beta) {
  for (int64_t l = 0; l < s.batch; ++l) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < s.k && !s.product_zero; ++p) {
          sum += detail::load_as_double(s.a, s.dtype, l * s.a_batch + i * s.a_row + p * s.a_col) *
                 detail::load_as_double(s.b, s.dtype, l * s.b_batch + p * s.b_row + j * s.b_col);
        }
        const int64_t at = l * s.c_batch + i * s.c_row + j;
        double value = alpha * sum;
        if (beta != 0.0) value += beta * detail::load_as_double(s.c, s.dtype, at);
        detail::store_from_double(s.c, s.dtype, at, value);
      }
    }
  }
}

// Needs no GPU: the problem's views point at host memory, which describe_gemm only reads strides from.
TEST(CudaGemmCanonicalForm, AddressesTheSameElementsAsTheProblemForEveryLayout) {
  const std::vector<std::array<int64_t, 3> > sizes = {{1, 1, 1}, {1, 9, 5}, {9, 1, 5}, {7, 5, 1}, {13, 11, 6}};
  // Batches 3 of A and C with B shared: when packed (no gap between batches), folded into M
  // (fold_broadcast_batch) where A is K-major.
  const std::vector<std::array<int64_t, 4> > batches = {{-1, -1, -1, 0}, {3, 3, 3, 0}, {1, 3, 3, 0},
                                                        {3, -1, 3, 0},   {3, 1, 3, 1}, {3, -1, 3, 1}};
  uint64_t seed = 100;
  for (const auto& [m, n, k] : sizes) {
    for (const auto& [ba, bb, bc, packed] : batches) {
      for (int layout = 0; layout < 64; ++layout) {
        GemmSpec spec;
        spec.m = m, spec.n = n, spec.k = k;
        spec.transpose_a = layout & 1, spec.transpose_b = layout & 2, spec.c_col_major = layout & 4;
        spec.a_col_major = layout & 8, spec.b_col_major = layout & 16, spec.aligned = layout & 32;
        spec.batch_a = ba, spec.batch_b = bb, spec.batch_c = bc, spec.packed_batches = packed != 0;
        spec.alpha = 0.75, spec.beta = layout % 3 == 0 ? 0.0 : -0.5;
        SCOPED_TRACE(spec.describe());
        std::mt19937_64 rng(++seed);
        const Precision& precision = kF32;
        // Host-only copies of the operands (no device memory is touched).
        auto host_matrix = [&](MatrixSpec ms, bool fill) {
          const int64_t inner = ms.col_major ? ms.rows : ms.cols;
          const int64_t outer = ms.col_major ? ms.cols : ms.rows;
          const int64_t ld = ms.aligned ? round_up(std::max<int64_t>(inner, 1), 8) : inner + 1;
          const int64_t batch_stride = packed != 0 ? ld * outer : ld * outer + 3;
          test::HostTensor buffer =
              test::HostTensor::contiguous(precision.dtype, {1 + std::max<int64_t>(ms.batch, 1) * batch_stride + 8});
          test::poison_nan(buffer.view);
          TensorView view = buffer.view;
          view.data = static_cast<float*>(buffer.view.data) + 1;
          const int64_t row_stride = ms.col_major ? 1 : ld, col_stride = ms.col_major ? ld : 1;
          if (ms.batch < 0) {
            view.rank = 2, view.extents = {ms.rows, ms.cols}, view.strides = {row_stride, col_stride};
          } else {
            view.rank = 3, view.extents = {ms.batch, ms.rows, ms.cols};
            view.strides = {batch_stride, row_stride, col_stride};
          }
          if (fill) test::fill_random(view, rng);
          return std::pair{std::move(buffer), view};
        };
        auto [a_buffer, a] =
            host_matrix({ba, spec.transpose_a ? k : m, spec.transpose_a ? m : k, spec.a_col_major, spec.aligned}, true);
        auto [b_buffer, b] =
            host_matrix({bb, spec.transpose_b ? n : k, spec.transpose_b ? k : n, spec.b_col_major, spec.aligned}, true);
        auto [c_buffer, c] = host_matrix({bc, m, n, spec.c_col_major, spec.aligned}, spec.beta != 0.0);
        auto [e_buffer, expected] = host_matrix({bc, m, n, spec.c_col_major, spec.aligned}, false);
        if (spec.beta != 0.0) {
          test::for_each_offset(
              c, [&](int64_t off) { static_cast<float*>(expected.data)[off] = static_cast<float*>(c.data)[off]; });
        }
        GemmProblem problem;
        problem.a = a, problem.b = b, problem.c = expected;
        problem.transpose_a = spec.transpose_a, problem.transpose_b = spec.transpose_b;
        problem.alpha = spec.alpha, problem.beta = spec.beta;
        cpu::reference::gemm(problem);
        problem.c = c;
        canonical_gemm_on_host(cuda::gemm::describe_gemm(problem), spec.alpha, spec.beta);
        EXPECT_LE(test::relative_l2(c, expected), 1e-6);
        EXPECT_FALSE(test::any_nan(c)) << "the canonical form read an element outside a view";
      }
    }
  }
}

// The kernel a host-memory problem would run on a described device (selection reads no device state:
// CUTLASS's can_implement and the shared memory sizes are host-side).
std::string selected_on(int capability, DType dtype, bool allow_tf32, int64_t m, int64_t n, int64_t k, bool transpose_a,
                        bool transpose_b, bool c_col_major, int64_t offset = 0) {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  // Selection reads addresses, never data: views into a 256-byte aligned range that is never allocated.
  auto* base = reinterpret_cast<std::byte*>(uintptr_t{1} << 40);
  auto view = [&](int64_t rows, int64_t cols, bool col_major, std::byte* data) {
    TensorView v;
    v.data = data + offset * size;
    v.dtype = dtype;
    v.rank = 2;
    v.extents = {rows, cols};
    v.strides = {col_major ? 1 : cols, col_major ? rows : 1};
    return v;
  };
  GemmProblem p;
  p.a = view(transpose_a ? k : m, transpose_a ? m : k, false, base);
  p.b = view(transpose_b ? n : k, transpose_b ? k : n, false, base + m * k * size);
  p.c = view(m, n, c_col_major, base + (m * k + k * n) * size);
  p.transpose_a = transpose_a, p.transpose_b = transpose_b, p.allow_tf32 = allow_tf32;
  const cuda::gemm::GemmDevice device{0, capability, 132, 227 * 1024};
  return cuda::gemm::select_gemm_kernel(cuda::gemm::describe_gemm(p), device, allow_tf32).name();
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CudaGemmSelection, AlignedHalfPrecisionSelectsTheHopperKernelOnA90DeviceInEveryLayout) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (int layout = 0; layout < 8; ++layout) {
      const std::string name = selected_on(90, dtype, false, 256, 512, 128, layout & 1, layout & 2, layout & 4);
      EXPECT_TRUE(starts_with(name, "sm90_")) << name << " layout " << layout;
      const std::string tail = selected_on(90, dtype, false, 136, 264, 72, layout & 1, layout & 2, layout & 4);
      EXPECT_TRUE(starts_with(tail, "sm90_")) << tail << " layout " << layout;
    }
  }
}

TEST(CudaGemmSelection, SmallGridsSelectSplitKOrStreamKAndLargeOnesTheDataParallelKernel) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const bool transpose_b : {false, true}) {
      // 32 tiles of 128 x 128: 4 slices of 1024.
      const std::string decode = selected_on(90, dtype, false, 16, 4096, 4096, false, transpose_b, false);
      EXPECT_NE(decode.find("_splitk"), std::string::npos) << decode;
      // 4 tiles: 32 slices of 2048 (33 do not divide K).
      const std::string k_heavy = selected_on(90, dtype, false, 256, 256, 65536, false, transpose_b, false);
      EXPECT_NE(k_heavy.find("_splitk"), std::string::npos) << k_heavy;
      // 128 tiles of 128 x 128 (one slice each) and 64 (two): no split-K, but 128 tiles of 64 x 128 fill the
      // device, so the ping-pong row runs them (CudaGemmSelection.WavesCostModel...).
      const std::string wide = selected_on(90, dtype, false, 64, 16384, 4096, false, transpose_b, false);
      EXPECT_NE(wide.find("_64x128x64_c1x1_pingpong"), std::string::npos) << wide;
      const std::string k_long = selected_on(90, dtype, false, 1024, 1024, 16384, false, transpose_b, false);
      EXPECT_NE(k_long.find("_64x128x64_c1x1_pingpong"), std::string::npos) << k_long;
      // A K that no slice count of at least 4 K tiles divides evenly (a prime), and 32 tiles even of 64 x 128:
      // stream-K.
      const std::string prime_k = selected_on(90, dtype, false, 16, 4096, 4099, false, transpose_b, false);
      EXPECT_NE(prime_k.find("_streamk"), std::string::npos) << prime_k;
      const std::string square = selected_on(90, dtype, false, 4096, 4096, 4096, false, transpose_b, false);
      EXPECT_NE(square.find("_coop"), std::string::npos) << square;
    }
  }
}

// Grids whose data-parallel tiles leave a partial last wave run the stream-K row where its evenly spread work costs
// less (gemm_stream_k_cost), it has two tiles per SM or more and no data-parallel row fills 1.4 to 2 waves: 2560 x 4096
// x 4096 (320 tiles of 128 x 256: 2.42 waves; 440 of 128 x 192: 3.33) on the 16-bit types, either B majorness. Where a
// data-parallel row fills 1.4 to 2 waves it runs instead: 2560^3 on 128 x 256 (200 tiles: 1.52 waves), 2304^3 on
// 128 x 192 (216 tiles). 4096^3, 5120^3, 8192^3 and the short-K 4096 x 4096 x 256 keep their data-parallel rows, and so
// do the grids the 128 x 192 and 192 x 192 rows fill (GridsThe128x256TilesLeaveHalfIdle..., GridsOfOneWaveOf192...).
TEST(CudaGemmSelection, PartialLastWavesRunTheStreamKRowWhereItsSpreadCostsLess) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const bool transpose_b : {false, true}) {
      const std::string name = selected_on(90, dtype, false, 2560, 4096, 4096, false, transpose_b, false);
      EXPECT_NE(name.find("_streamk"), std::string::npos) << name;
      EXPECT_NE(
          selected_on(90, dtype, false, 2560, 2560, 2560, false, transpose_b, false).find("_128x256x64_c2x1_coop"),
          std::string::npos);
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{1024, 2048, 2048}, {640, 2048, 4096}}) {
        const std::string one_wave = selected_on(90, dtype, false, m, n, k, false, transpose_b, false);
        EXPECT_NE(one_wave.find("_streamk"), std::string::npos) << one_wave << " " << m << "x" << n << "x" << k;
      }
      const std::string filling = selected_on(90, dtype, false, 2304, 2304, 2304, false, transpose_b, false);
      EXPECT_NE(filling.find("_128x192x64_c1x1_coop"), std::string::npos) << filling;
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
               {4096, 4096, 4096}, {5120, 5120, 5120}, {8192, 8192, 8192}, {4096, 4096, 256}, {3072, 3072, 3072}}) {
        const std::string name = selected_on(90, dtype, false, m, n, k, false, transpose_b, false);
        EXPECT_EQ(name.find("_streamk"), std::string::npos) << name << " " << m << "x" << n << "x" << k;
      }
    }
  }
  // The estimate itself: the spread work of 576 tiles of 128 x 128 over 132 SMs, 1.1 times, against 3 waves of 128 x
  // 256.
  const double stream_k = cuda::gemm::gemm_stream_k_cost(3072, 3072, 3072, 1, 128, 128, 132);
  EXPECT_NEAR(stream_k, 1.1 * 576 * 128 * 128 * (3072.0 + cuda::gemm::kGemmEpilogueDepth) / 0.9 / 132, 1.0);
  EXPECT_LT(stream_k, cuda::gemm::gemm_tile_cost(3072, 3072, 3072, 1, 128, 256, 132));
}

// The slice rule (gemm_split_k.hpp) on a 132-SM device with 128 x 128 x 64 tiles.
TEST(CudaGemmSelection, SplitKSlicesFillTheDeviceOnlyWhereEachTileGetsThreeOrMore) {
  auto slices = [](int64_t m, int64_t n, int64_t k, int64_t batch = 1, DType dtype = DType::bf16) {
    cuda::gemm::GemmShape s;
    s.dtype = dtype;
    s.m = m, s.n = n, s.k = k, s.batch = batch;
    return cuda::gemm::gemm_split_k_slices(s, 128, 128, 64, 132);
  };
  EXPECT_EQ(slices(256, 256, 65536), 32);  // 4 tiles, at most 33 slices; 32 divide K
  EXPECT_EQ(slices(16, 4096, 4096), 4);    // 32 tiles
  EXPECT_EQ(slices(1, 4096, 16384), 4);
  EXPECT_EQ(slices(64, 512, 4096), 16);      // 4 tiles, 33 at most; 32 would give slices of 128 (< 4 K tiles)
  EXPECT_EQ(slices(100, 200, 3072), 12);     // 2 tiles, capped at 64; slices of 256
  EXPECT_EQ(slices(1024, 1024, 16384), 0);   // 64 tiles: 2 slices a tile at most
  EXPECT_EQ(slices(64, 16384, 4096), 0);     // 128 tiles
  EXPECT_EQ(slices(256, 256, 65536, 2), 0);  // batched
  EXPECT_EQ(slices(256, 256, 512), 0);       // slices of at least 256: 2 at most
  EXPECT_EQ(slices(16, 4096, 4099), 0);      // a prime K
  EXPECT_EQ(slices(16, 4096, 3 * 1004), 0);  // 4 slices of 753, 3 of 1004: not multiples of 8 elements
  EXPECT_EQ(slices(16, 5120, 3 * 1024), 3);  // 40 tiles: 3 slices at most
  // fp32 splits in two where its tiles fill at most half the SMs (no 64-row fp32 tiles fill them otherwise).
  EXPECT_EQ(slices(1024, 1024, 16384, 1, DType::f32), 2);  // 64 tiles
  EXPECT_EQ(slices(256, 4096, 4096, 1, DType::f32), 2);
  EXPECT_EQ(slices(1024, 1024, 1024, 1, DType::f32), 2);   // slices of 512: 8 K tiles
  EXPECT_EQ(slices(1040, 1024, 16384, 1, DType::f32), 0);  // 72 tiles
  EXPECT_EQ(slices(1024, 1024, 16384, 2, DType::f32), 0);  // batched
  EXPECT_EQ(slices(16, 4096, 4096, 1, DType::f32), 4);     // three or more as for 16 bits
  for (const auto& [m, n, k] :
       std::vector<std::array<int64_t, 3> >{{256, 256, 65536}, {16, 4096, 4096}, {7, 999, 8192}}) {
    const int count = slices(m, n, k);
    ASSERT_GE(count, cuda::gemm::kMinSplitKSlices);
    const int64_t tiles = (m + 127) / 128 * ((n + 127) / 128);
    EXPECT_LE(count * tiles, 132) << "one wave";
    EXPECT_EQ(k % count, 0);
    EXPECT_EQ(k / count % 8, 0);
    EXPECT_GE(k / count, 4 * 64);
  }
  // The 64-row token rows (16 tokens a tile, 2 slices at least): M <= 16 only; one slice where their weight tiles
  // fill 0.9 to 2 waves.
  auto token_slices = [](int64_t m, int64_t n, int64_t k) {
    cuda::gemm::GemmShape s;
    s.dtype = DType::bf16;
    s.m = m, s.n = n, s.k = k, s.batch = 1;
    return cuda::gemm::gemm_swapped_split_k_slices(s, 16, 64, 64, 132, 2);
  };
  EXPECT_EQ(token_slices(16, 4096, 4096), 2);  // 64 tiles
  EXPECT_EQ(token_slices(1, 4096, 16384), 2);
  EXPECT_EQ(token_slices(17, 4096, 4096), 0);   // beyond one tile's tokens
  EXPECT_EQ(token_slices(16, 16384, 4096), 1);  // 256 tiles
  EXPECT_EQ(token_slices(9, 11008, 4096), 1);   // 172 tiles
  EXPECT_EQ(token_slices(16, 7552, 4096), 0);   // 118 tiles: under 0.9 of a wave, and one slice a tile at most
  EXPECT_EQ(token_slices(16, 32768, 4096), 0);  // 512 tiles: 4 waves
  EXPECT_EQ(token_slices(16, 16384, 4100), 0);  // K not of whole 16-byte vectors
}

// The waves cost model and the rule on its own (choose_gemm_candidate: no compiled rows involved), on a
// 132-SM device.
TEST(CudaGemmSelection, WavesCostModelPicksSmallTilesForSmallGridsAnd128x256ForLargeOnes) {
  using cuda::gemm::GemmCandidate;
  constexpr int kSms = 132;
  // Efficiency falls with the tile's area, 128 x 256 the reference.
  EXPECT_EQ(cuda::gemm::gemm_tile_efficiency(128, 256), 1.0);
  EXPECT_GT(cuda::gemm::gemm_tile_efficiency(128, 256), cuda::gemm::gemm_tile_efficiency(128, 128));
  EXPECT_GT(cuda::gemm::gemm_tile_efficiency(128, 128), cuda::gemm::gemm_tile_efficiency(64, 128));
  EXPECT_EQ(cuda::gemm::gemm_tile_efficiency(64, 128), cuda::gemm::gemm_tile_efficiency(128, 64));
  EXPECT_GT(cuda::gemm::gemm_tile_efficiency(64, 128), cuda::gemm::gemm_tile_efficiency(64, 64));
  // 1024^3: 32 tiles of 128 x 256 (a quarter-full wave) against one wave of 128 tiles of 64 x 128.
  EXPECT_LT(cuda::gemm::gemm_tile_cost(1024, 1024, 1024, 1, 64, 128, kSms),
            cuda::gemm::gemm_tile_cost(1024, 1024, 1024, 1, 128, 256, kSms));
  // Waves: 2048^3 is one wave of 128 x 256 or four 64 x 128 tiles an SM (equal work), which a ping-pong row runs as
  // two pairs of tiles, each tile with kGemmPingPongTileDepth more of K; a tile whose epilogue does not overlap a main
  // loop pays kGemmEpilogueDepth more of K.
  constexpr int kEpilogue = cuda::gemm::kGemmEpilogueDepth;
  constexpr int kRamp = cuda::gemm::kGemmPingPongTileDepth;
  const double small_efficiency = cuda::gemm::gemm_tile_efficiency(64, 128);
  EXPECT_EQ(cuda::gemm::gemm_tile_cost(2048, 2048, 2048, 1, 128, 256, kSms), 1.0 * 128 * 256 * (2048 + kEpilogue));
  EXPECT_NEAR(cuda::gemm::gemm_tile_cost(2048, 2048, 2048, 1, 64, 128, kSms, true),
              4.0 * 64 * 128 * (2048 + kRamp) / small_efficiency, 1.0);
  // Three tiles an SM: a pair and a lone tile; 1024^3 a lone tile. Short K: the waves and the common factor.
  EXPECT_NEAR(cuda::gemm::gemm_tile_cost(1792, 1792, 1792, 1, 64, 128, kSms, true),
              (2.0 / small_efficiency + 1.0 / cuda::gemm::kGemmPingPongLoneEfficiency) * 64 * 128 * (1792 + kRamp),
              1.0);
  EXPECT_NEAR(cuda::gemm::gemm_tile_cost(1024, 1024, 1024, 1, 64, 128, kSms, true),
              64.0 * 128 * (1024 + kRamp) / cuda::gemm::kGemmPingPongLoneEfficiency, 1.0);
  EXPECT_EQ(cuda::gemm::gemm_tile_cost(128, 4096, 128, 64, 64, 128, kSms, true),
            32.0 * 64 * 128 * 128 / small_efficiency);
  EXPECT_EQ(cuda::gemm::gemm_tile_cost(128, 4096, 128, 64, 128, 256, kSms),
            8.0 * 128 * 256 * (128 + kEpilogue));  // 1024 tiles

  const GemmCandidate big{128, 256, false, false}, small{64, 128, false, false, true};
  const GemmCandidate stream_k{128, 128, false, true}, split_k{128, 128, true, false};
  const std::vector<GemmCandidate> data_parallel = {big, small};
  auto choose = [&](const std::vector<GemmCandidate>& rows, int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
    return cuda::gemm::choose_gemm_candidate(m, n, k, batch, rows, kSms);
  };
  EXPECT_EQ(choose(data_parallel, 1024, 1024, 1024), 1);
  EXPECT_EQ(choose(data_parallel, 256, 4096, 4096), 1);  // 32 tiles of 128 x 256, 128 of 64 x 128
  for (const int64_t m : {1, 16, 64}) {
    for (const int64_t k : {4096, 16384}) {
      EXPECT_EQ(choose(data_parallel, m, 16384, k), 1) << m << " " << k;
      EXPECT_EQ(choose(data_parallel, m, 4096, k), 1) << m << " " << k;
    }
  }
  // 1792^3: 98 tiles of 128 x 256 against three 64 x 128 tiles an SM (measured 22.3 against 27.0 us, bf16, H200);
  // 512 x 4096 x 4096: one pair of 64 x 128 tiles an SM against 32 tiles of 128 x 256.
  EXPECT_EQ(choose(data_parallel, 512, 4096, 4096), 1);
  for (const int64_t size : {1792, 2048, 4096, 8192}) {
    EXPECT_EQ(choose(data_parallel, size, size, size), 0) << size;
    EXPECT_EQ(choose({small, big}, size, size, size), 1) << size << ": not the table order";
  }
  EXPECT_EQ(choose(data_parallel, 16384, 16384, 4096), 0);
  // Short K: the cooperative tile's epilogue outweighs its 2 K tiles (batched 64 x 128 x 4096 x 128: 8 waves of
  // 128 x 256 against 32 of 64 x 128 ping-pong, measured 55.8 against 37.3 us); without the overlap the larger
  // tile keeps it; at K = 256 the larger tile keeps it too (4 waves against 16).
  EXPECT_EQ(choose(data_parallel, 128, 4096, 128, 64), 1);
  EXPECT_EQ(choose({big, GemmCandidate{64, 128, false, false}}, 128, 4096, 128, 64), 0);
  EXPECT_EQ(choose(data_parallel, 4096, 4096, 256), 0);
  // Equal estimates keep the first row.
  EXPECT_EQ(choose({big, big}, 1024, 1024, 1024), 0);
  // Split-K's rule (its refusal) admits only small grids with a long K: whenever a split-K row accepts, it runs.
  EXPECT_EQ(choose({big, small, stream_k, split_k}, 16, 4096, 4096), 3);
  EXPECT_EQ(choose({big, small, stream_k, split_k}, 256, 256, 65536), 3);
  // Among split-K rows, the one whose tiles pad the output least: decode's M <= 64 on the swapped rows (64 of M x
  // 128 of N); of rows that pad alike (M 65-128, 256 x 256), the first in the table.
  const GemmCandidate swapped_split_k{64, 128, true, false};
  const std::vector<GemmCandidate> both_split_k = {big, small, stream_k, split_k, swapped_split_k};
  for (const int64_t m : {1, 7, 16, 64}) {
    EXPECT_EQ(choose(both_split_k, m, 4096, 4096), 4) << m;
    EXPECT_EQ(choose(both_split_k, m, 4160, 16384), 4) << m;
  }
  EXPECT_EQ(choose(both_split_k, 100, 4096, 4096), 3);
  EXPECT_EQ(choose(both_split_k, 128, 1024, 4096), 3);
  EXPECT_EQ(choose(both_split_k, 256, 256, 65536), 3);
  EXPECT_EQ(choose({big, small, stream_k, swapped_split_k, split_k}, 128, 1024, 4096), 3) << "equal: the first";
  EXPECT_EQ(choose({big, small, stream_k, swapped_split_k, split_k}, 256, 256, 65536), 3) << "equal: the first";
  // TF32 with B MN-major: the tall split-K tile (C's 256 x 128) listed first runs where it pads no more (1024 x 1024 x
  // 16384: 32 tiles against 64 of the same area), the 128 x 128 row where it pads less (M 384: 512 rows against 384).
  const GemmCandidate tall_split_k{256, 128, true, false};
  EXPECT_EQ(choose({big, tall_split_k, split_k}, 1024, 1024, 16384), 1);
  EXPECT_EQ(choose({big, tall_split_k, split_k}, 256, 4096, 16384), 1);
  EXPECT_EQ(choose({big, tall_split_k, split_k}, 384, 256, 3000), 2);
  // Token tiles (64 x 32) run where M fills one tile row to more than three quarters and their tiles fill 0.9 to
  // 1.0 of one wave, ahead of split-K; nowhere else, and never by the waves model.
  const GemmCandidate token{64, 32, false, false, false, true};
  const std::vector<GemmCandidate> with_token = {big, small, stream_k, token, swapped_split_k};
  EXPECT_EQ(choose(with_token, 64, 4096, 4096), 3);
  EXPECT_EQ(choose(with_token, 49, 4096, 16384), 3);
  EXPECT_EQ(choose(with_token, 64, 3840, 4096), 3);  // 120 tiles
  EXPECT_EQ(choose(with_token, 48, 4096, 4096), 4);
  EXPECT_EQ(choose(with_token, 64, 4096, 4096, 2), 4);
  EXPECT_EQ(choose(with_token, 64, 3712, 4096), 4);  // 116 tiles: under 0.9 of the SMs
  EXPECT_EQ(choose(with_token, 64, 4480, 4096), 4);  // 140 tiles: a second wave
  EXPECT_EQ(choose({big, small, token}, 512, 512, 4096), 1);
  EXPECT_EQ(cuda::gemm::gemm_token_tile_fills_one_wave(64, 4096, 1, 64, 32, 132), true);
  EXPECT_EQ(cuda::gemm::gemm_token_tile_fills_one_wave(65, 4096, 1, 64, 32, 132), false);
  // Stream-K when even the chosen tile leaves more than half the SMs idle (16 x 4096: 32 tiles of 64 x 128).
  EXPECT_EQ(choose({big, small, stream_k}, 16, 4096, 4099), 2);
  EXPECT_EQ(choose({big, small, stream_k}, 1024, 1024, 1024), 1);  // 128 tiles of 64 x 128
  EXPECT_EQ(choose({big, stream_k}, 1024, 1024, 1024), 1);         // 32 tiles of 128 x 256
  EXPECT_EQ(choose({big, small, stream_k}, 4096, 4096, 4096), 0);
  EXPECT_EQ(choose({stream_k}, 1024, 1024, 1024), 0);
  // One wave of stream-K tiles over more than half the SMs where the chosen row needs more tiles than SMs, at K of
  // kStreamKOneWaveMinK or more: 1024 x 2048 x 2048 (128 tiles of 128 x 128, 256 of 64 x 128), 768 x 1536 x 2048 (72);
  // not at half the SMs or fewer (256 x 4096 x 4096, 1024 x 1024 x 4096: 64), nor at a shorter K.
  EXPECT_EQ(choose({big, small, stream_k}, 1024, 2048, 2048), 2);
  EXPECT_EQ(choose({big, small, stream_k}, 768, 1536, 2048), 2);
  EXPECT_EQ(choose({big, small, stream_k}, 256, 4096, 4096), 1);
  EXPECT_EQ(choose({big, small, stream_k}, 1024, 1024, 4096), 1);
  EXPECT_EQ(choose({big, small, stream_k}, 1024, 2048, 1024), 1);
  EXPECT_EQ(choose({}, 1024, 1024, 1024), -1);
}

// A K-major A, B K- or MN-major, C row-major, packed, at (never read) 256-byte aligned addresses: the kernel the
// registry selects on a 132-SM 9.0 device.
std::string selected_canonical(DType dtype, int64_t m, int64_t n, int64_t k, bool b_k_major, int64_t batch = 1) {
  cuda::gemm::GemmShape s;
  s.dtype = dtype;
  s.m = m, s.n = n, s.k = k, s.batch = batch;
  s.a_row = k, s.a_col = 1, s.a_batch = m * k;
  s.b_row = b_k_major ? 1 : n, s.b_col = b_k_major ? k : 1, s.b_batch = k * n;
  s.c_row = n, s.c_batch = m * n;
  s.a = reinterpret_cast<const void*>(uintptr_t{1} << 40);
  s.b = reinterpret_cast<const void*>(uintptr_t{2} << 40);
  s.c = reinterpret_cast<void*>(uintptr_t{3} << 40);
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  return cuda::gemm::select_gemm_kernel(s, device, false).name();
}

// The rule's row for m x n x k is sm90_<type>_ak_b<k|mn>_<suffix> for both 16-bit types and B either majorness.
void expect_16bit_rows(int64_t m, int64_t n, int64_t k, const std::string& suffix) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const bool b_k_major : {false, true}) {
      const std::string prefix =
          std::string("sm90_") + (dtype == DType::f16 ? "f16" : "bf16") + "_ak_b" + (b_k_major ? "k" : "mn") + "_";
      EXPECT_EQ(selected_canonical(dtype, m, n, k, b_k_major), prefix + suffix) << m << "x" << n << "x" << k;
    }
  }
}

TEST(CudaGemmSelection, SmallGridsRunThe64x128PingPongRowsAndLargeOnesThe128x256Rows) {
  bool hopper = false;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    hopper = hopper || std::string(kernel->name).find("_64x128x64_c1x1_pingpong") != std::string::npos;
  }
  if (!hopper) GTEST_SKIP() << "this build has no Hopper ping-pong rows (ATTNKIT_CUDA_ARCHS without 90a)";
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const bool b_k_major : {false, true}) {
      const std::string prefix =
          std::string("sm90_") + (dtype == DType::f16 ? "f16" : "bf16") + "_ak_b" + (b_k_major ? "k" : "mn") + "_";
      auto expect = [&](int64_t m, int64_t n, int64_t k, int64_t batch, const std::string& suffix) {
        const std::string name = selected_canonical(dtype, m, n, k, b_k_major, batch);
        EXPECT_EQ(name, prefix + suffix) << m << "x" << n << "x" << k << " batch " << batch;
      };
      expect(1024, 1024, 1024, 1, "64x128x64_c1x1_pingpong");
      expect(256, 4096, 4096, 1, "64x128x64_c1x1_pingpong");
      for (const int64_t m : {2, 16, 17, 48, 49, 64}) {  // M 1-2, B MN-major: Narrow16BitDecodeShapesSelect...
        if (m == 2 && !b_k_major) continue;
        // A wide weight: M <= 16 on the 64-row token tiles in one slice (256 tiles: under 2 waves), else 64 x 128.
        const std::string wide = m <= 16 ? "64x16x64_c1x1_pingpong_swapped_splitk" : "64x128x64_c1x1_pingpong";
        expect(m, 16384, 4096, 1, wide);
        expect(m, 16384, 16384, 1, wide);
        expect(m, 11008, 4096, 1, wide);
        expect(m, 32768, 4096, 1, "64x128x64_c1x1_pingpong");  // 512 token tiles: 4 waves
        // Long K on a small grid: split-K's rule holds, on the swapped rows: M <= 16 on 64 weight rows x 16 tokens
        // (64 tiles, 2 slices), M 17-48 on 128 x 64 (32 tiles, 4 slices); M 49-64 fills the 64 x 32 token tiles'
        // one wave (128 tiles) and runs there in one launch.
        const std::string decode = m <= 16   ? "64x16x64_c1x1_pingpong_swapped_splitk"
                                   : m <= 48 ? "128x64x64_c1x1_swapped_splitk"
                                             : "64x32x64_c1x2_pingpong";
        expect(m, 4096, 4096, 1, decode);
        expect(m, 4096, 16384, 1, decode);
      }
      // The token tiles only where they fill one wave: not 2 waves at N 8192, nor a quarter of the SMs at 1024.
      expect(64, 8192, 4096, 1, "128x128x64_c1x1_streamk");
      expect(64, 1024, 4096, 1, "128x64x64_c1x1_swapped_splitk");
      expect(128, 4096, 4096, 1, "128x128x64_c1x1_splitk");
      expect(256, 256, 65536, 1, "128x64x64_c1x1_swapped_splitk");
      expect(2048, 2048, 2048, 1, "128x256x64_c2x1_coop");
      expect(4096, 4096, 4096, 1, "128x256x64_c2x1_coop");
      expect(8192, 8192, 8192, 1, "128x256x64_c2x1_coop");
      expect(16384, 4096, 4096, 1, "128x256x64_c2x1_coop");
      // Short K: the ping-pong rows overlap each tile's epilogue with the next one's main loop; from K = 256 the
      // larger tile's efficiency wins again (measured: docs/perf.md, "Row choice for short K").
      expect(128, 4096, 128, 64, "64x128x64_c1x1_pingpong");
      expect(4096, 4096, 256, 1, "128x256x64_c2x1_coop");
    }
  }
}

// The 128 x 192 cooperative rows take the grids whose 128 x 256 tiles leave the SMs half idle or the last wave mostly
// empty, where 128 x 192 tiles fill it better (H200, docs/perf.md, session 50, graph time against 128 x 256 / stream-K:
// 1536^3 15.8 against 20.0 / 20.9 us, 3072^3 91.2 against 106.3 / 95.9, 3072 x 3072 x 1024 32.3 against 41.1 / 44.0,
// 6144 x 3072 x 3072 176.6 against 186.9 / 187.6; 3072^3 and 6144 x 3072 x 3072 moved on to the 192 x 192 rows since,
// GridsOfOneWaveOf192x192TilesRunTheWideRows, and 1536^3 to the 192 x 96 ones, GridsOfOneWaveOf192x96Tiles...); 2048^3
// (one wave of 128 x 256, two of 128 x 192), 4096^3 and 16384 x 4096 x 4096 keep 128 x 256, 1024^3 the 64 x 128
// ping-pong rows.
TEST(CudaGemmSelection, GridsThe128x256TilesLeaveHalfIdleRunThe128x192Rows) {
  const bool has_192_rows =
      std::any_of(cuda::gemm::gemm_kernels().begin(), cuda::gemm::gemm_kernels().end(),
                  [](const cuda::gemm::GemmKernel* k) { return k->tile_m == 128 && k->tile_n == 192; });
  if (!has_192_rows) GTEST_SKIP() << "this build has no 128 x 192 Hopper rows (ATTNKIT_CUDA_ARCHS without 90a)";
  EXPECT_GT(cuda::gemm::gemm_tile_efficiency(128, 256), cuda::gemm::gemm_tile_efficiency(128, 192));
  EXPECT_GT(cuda::gemm::gemm_tile_efficiency(128, 192), cuda::gemm::gemm_tile_efficiency(128, 128));
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
           {2048, 3072, 3072}, {2048, 3072, 1024}, {1536, 4096, 1536}, {3072, 3072, 1024}}) {
    expect_16bit_rows(m, n, k, "128x192x64_c1x1_coop");
  }
  for (const auto& [m, n, k] :
       std::vector<std::array<int64_t, 3> >{{2048, 2048, 2048}, {4096, 4096, 4096}, {16384, 4096, 4096}}) {
    expect_16bit_rows(m, n, k, "128x256x64_c2x1_coop");
  }
  expect_16bit_rows(1024, 1024, 1024, "64x128x64_c1x1_pingpong");
}

// The 192 x 192 wide-tile rows take the grids their tiles fill in one wave (or whole waves) where the 128-row tiles
// leave a partial one (H200, docs/perf.md, session 52, graph time against the rule's earlier row: 1536 x 3072 x 1024
// 18.1-18.5 against 21.1 us, 2048 x 2304 x 2048 29.8-31.9 against 35.8-37.0, 768 x 6144 x 4096 53.4-59.0 against
// 70.7-72.9, 6144 x 768 x 1024 18.9-19.4 against 21.1-21.4; 3072^3, 6144 x 3072 x 3072 and 5120^3 level with the 128 x
// 192 and 128 x 256 rows or ahead); 1536^3 (64 of them: half the SMs) runs on 192 x 96
// (GridsOfOneWaveOf192x96Tiles...), 3072 x 3072 x 1024 keeps 128 x 192, where two waves of the staged epilogue
// (kGemmStagedEpilogueDepth) ran 3-5 % slower than three of 128 x 192; 4096^3 keeps 128 x 256.
TEST(CudaGemmSelection, GridsOfOneWaveOf192x192TilesRunTheWideRows) {
  const bool has_wide_rows = std::any_of(cuda::gemm::gemm_kernels().begin(), cuda::gemm::gemm_kernels().end(),
                                         [](const cuda::gemm::GemmKernel* k) { return k->tile_m == 192; });
  if (!has_wide_rows) GTEST_SKIP() << "this build has no 192 x 192 Hopper rows (ATTNKIT_CUDA_ARCHS without 90a)";
  const std::vector<std::array<int64_t, 3> > one_wave = {{1536, 3072, 1024}, {2048, 2304, 2048}, {2048, 2304, 1024},
                                                         {768, 6144, 4096},  {6144, 768, 1024},  {3072, 3072, 3072},
                                                         {6144, 3072, 3072}, {5120, 5120, 5120}};
  for (const auto& [m, n, k] : one_wave) expect_16bit_rows(m, n, k, "192x192x64_c1x1_wide");
  expect_16bit_rows(3072, 3072, 1024, "128x192x64_c1x1_coop");
  expect_16bit_rows(1536, 1536, 1536, "192x96x64_c1x1_wide");
  expect_16bit_rows(4096, 4096, 4096, "128x256x64_c2x1_coop");
  // The staged epilogue's depth in the estimate: two waves of 192 x 192 at K = 1024.
  EXPECT_EQ(cuda::gemm::gemm_tile_cost(3072, 3072, 1024, 1, 192, 192, 132, false, 1.0, true),
            2.0 * 192 * 192 * (1024 + cuda::gemm::kGemmStagedEpilogueDepth));
}

// The 192 x 96 wide-tile rows take the grids their tiles fill in one wave where 128 x 192 tiles leave a third of the
// SMs idle and 64 x 128 ones make two or three a multiprocessor (H200, docs/perf.md, session 54, bf16 graph time
// against the rule's earlier row, B MN | K-major: 1536^3 14.5 | 14.0 against 16.0 | 15.7 us, 1536 x 1536 x 4096 31.4 |
// 30.3 against 34.6 | 36.6, 768 x 3072 x 2048 17.5 | 17.8 against 19.9 | 20.1); 1024^3 keeps the 64 x 128 ping-pong
// rows (6.8 against 9.9 us), 512 x 4096 x 4096 runs one wave of stream-K tiles (27.4, ping-pong's pairs 28.0, 192 x 96
// 36.1), 1792^3 128 x 256 (22.3 against 27.0 on ping-pong's three tiles an SM), 1536 x 3072 x 1024 192 x 192.
TEST(CudaGemmSelection, GridsOfOneWaveOf192x96TilesRunTheNarrowWideRows) {
  const bool has_rows =
      std::any_of(cuda::gemm::gemm_kernels().begin(), cuda::gemm::gemm_kernels().end(),
                  [](const cuda::gemm::GemmKernel* k) { return k->tile_m == 192 && k->tile_n == 96; });
  if (!has_rows) GTEST_SKIP() << "this build has no 192 x 96 Hopper rows (ATTNKIT_CUDA_ARCHS without 90a)";
  for (const auto& [m, n, k] :
       std::vector<std::array<int64_t, 3> >{{1536, 1536, 1536}, {1536, 1536, 4096}, {768, 3072, 2048}}) {
    expect_16bit_rows(m, n, k, "192x96x64_c1x1_wide");
  }
  expect_16bit_rows(1024, 1024, 1024, "64x128x64_c1x1_pingpong");
  expect_16bit_rows(512, 4096, 4096, "128x128x64_c1x1_streamk");
  expect_16bit_rows(1792, 1792, 1792, "128x256x64_c2x1_coop");
  expect_16bit_rows(1536, 3072, 1024, "192x192x64_c1x1_wide");
}

// x [batch, M, K] @ W [K, N] with W shared by the batch (batch stride 0) and packed x and C: one problem of
// batch x M rows (fold_broadcast_batch), so batched decode tokens run on the batch-1 swapped split-K rows.
GemmProblem batched_problem(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t b_batch, int64_t a_batch_stride) {
  auto view = [](std::array<int64_t, 3> extents, std::array<int64_t, 3> strides, uintptr_t address) {
    TensorView v;
    v.data = reinterpret_cast<void*>(address);
    v.dtype = DType::bf16;
    v.rank = 3;
    v.extents = {extents[0], extents[1], extents[2]};
    v.strides = {strides[0], strides[1], strides[2]};
    return v;
  };
  GemmProblem p;
  p.a = view({batch, m, k}, {a_batch_stride, k, 1}, uintptr_t{1} << 40);
  p.b = view({b_batch, k, n}, {k * n, n, 1}, uintptr_t{2} << 40);
  p.c = view({batch, m, n}, {m * n, n, 1}, uintptr_t{3} << 40);
  return p;
}

TEST(CudaGemmSelection, ABatchSharingBFoldsIntoMAndOthersStayBatched) {
  const cuda::gemm::GemmShape folded = cuda::gemm::describe_gemm(batched_problem(3, 16, 4096, 4096, 1, 16 * 4096));
  EXPECT_EQ(folded.m, 48);
  EXPECT_EQ(folded.batch, 1);
  EXPECT_EQ(folded.a_batch, 0);
  EXPECT_EQ(folded.c_batch, 0);
  EXPECT_EQ(folded.a_row, 4096);
  EXPECT_EQ(folded.c_row, 4096);
  // B batched, or A's batches apart by more than its rows: a batch of 3 as before.
  const cuda::gemm::GemmShape b_batched = cuda::gemm::describe_gemm(batched_problem(3, 16, 4096, 4096, 3, 16 * 4096));
  EXPECT_EQ(b_batched.m, 16);
  EXPECT_EQ(b_batched.batch, 3);
  const cuda::gemm::GemmShape a_apart = cuda::gemm::describe_gemm(batched_problem(3, 16, 4096, 4096, 1, 17 * 4096));
  EXPECT_EQ(a_apart.m, 16);
  EXPECT_EQ(a_apart.batch, 3);
  bool swapped_rows = false;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    swapped_rows = swapped_rows || std::string(kernel->name).find("_swapped_splitk") != std::string::npos;
  }
  if (!swapped_rows) GTEST_SKIP() << "this build has no swapped split-K rows (ATTNKIT_CUDA_ARCHS without 90a)";
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  EXPECT_EQ(cuda::gemm::select_gemm_kernel(folded, device, false).name(),
            "sm90_bf16_ak_bmn_128x64x64_c1x1_swapped_splitk");
}

TEST(CudaGemmSelection, HopperKernelsAreNotSelectedBefore90) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    EXPECT_FALSE(starts_with(selected_on(80, dtype, false, 256, 512, 128, false, false, false), "sm90_"));
  }
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

TEST(CudaGemmSelection, OddExtentsWithAlignedStridesRunTheHopperKernelDirectly) {
  // Leading dimensions padded to 8 elements, extents odd: TMA bounds the boxes by the extents.
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const std::string name = selected_on(90, dtype, false, 1000, 3000, 776, false, false, false);
    EXPECT_TRUE(starts_with(name, "sm90_") && !ends_with(name, "+staged")) << name;
  }
}

TEST(CudaGemmSelection, MisalignedProblemsRunStagedOnTensorCores) {
  for (const int64_t offset : {0, 1}) {
    const std::string odd_k = selected_on(90, DType::bf16, false, 256, 256, 63, false, false, false, offset);
    EXPECT_TRUE(starts_with(odd_k, "sm90_bf16_") && ends_with(odd_k, "+staged")) << odd_k;
    // An N that is not a multiple of 8: the Hopper rows need C's rows in whole 16-byte vectors, so B and C
    // are staged with N rounded up.
    const std::string odd_n = selected_on(90, DType::f16, false, 256, 250, 64, false, false, false, offset);
    EXPECT_TRUE(starts_with(odd_n, "sm90_f16_") && ends_with(odd_n, "+staged")) << odd_n;
    // fp32 on the Hopper 3xTF32 rows, A's leading dimension (66 elements) staged.
    const std::string f32 = selected_on(90, DType::f32, false, 256, 256, 66, false, false, false, offset);
    EXPECT_TRUE(starts_with(f32, "sm90_3xtf32_") && ends_with(f32, "+staged")) << f32;
    const std::string bf16_80 = selected_on(80, DType::bf16, false, 256, 256, 63, false, false, false, offset);
    EXPECT_TRUE(starts_with(bf16_80, "sm80_bf16_") || bf16_80 == "simt_bf16") << bf16_80;  // sm80 bf16: full set
  }
  EXPECT_EQ(selected_on(90, DType::f16, false, 256, 256, 0, false, false, false), "simt_f16");  // K = 0
}

// Every N that is not a multiple of 8 (the canonical N: C's row length, M when C is column-major) runs on a
// staged Hopper row in every layout, aligned strides or not, decode-like grids (stream-K) included, and the
// Hopper rows refuse it unstaged.
TEST(CudaGemmSelection, OddNSelectsTheStagedHopperKernelInEveryLayout) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (int layout = 0; layout < 8; ++layout) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
               {1, 1, 64}, {3, 7, 64}, {250, 250, 64}, {1023, 1025, 1027}, {15, 4097, 4096}}) {
        for (const int64_t offset : {0, 1}) {
          const bool c_col_major = layout & 4;
          // m and n are both odd or both 250, so the canonical N is not a multiple of 8 either way.
          const std::string name = selected_on(90, dtype, false, m, n, k, layout & 1, layout & 2, c_col_major, offset);
          EXPECT_TRUE(starts_with(name, "sm90_") && ends_with(name, "+staged"))
              << name << " layout " << layout << " " << m << "x" << n << "x" << k << " offset " << offset;
        }
      }
    }
  }
  // A decode-like grid keeps its small-grid row: split-K on the padded N (33 tiles of 64 x 128: 4 slices).
  const std::string decode = selected_on(90, DType::bf16, false, 16, 4097, 4096, false, true, false);
  EXPECT_NE(decode.find("_swapped_splitk"), std::string::npos) << decode;
}

TEST(CudaGemmSelection, HopperRowsRefuseAnOddNUnstagedAndAcceptItPadded) {
  std::vector<std::byte> memory(1 << 20);
  auto* base = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<int64_t>(memory.data()), 256));
  cuda::gemm::GemmShape shape;
  shape.dtype = DType::bf16;
  shape.m = 64, shape.n = 61, shape.k = 64, shape.batch = 1;
  shape.a_row = 64, shape.a_col = 1;  // K-major A, K-major B with 64-element (aligned) leading dimensions
  shape.b_row = 1, shape.b_col = 64;
  shape.c_row = 64;  // C's leading dimension aligned, its row length (N = 61) not
  shape.a = base, shape.b = base + 16384, shape.c = base + 32768;
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  EXPECT_TRUE(cuda::gemm::tma_addressable(shape));
  EXPECT_FALSE(cuda::gemm::gemm_n_aligned(shape));
  const cuda::gemm::GemmStaging staging = cuda::gemm::tma_staging(shape);
  EXPECT_TRUE(staging.pad_n && staging.b && staging.c);
  EXPECT_FALSE(staging.a);
  const cuda::gemm::GemmShape staged = cuda::gemm::staged_shape(shape, staging);
  EXPECT_EQ(staged.n, 64);
  EXPECT_EQ(staged.m, shape.m);
  EXPECT_EQ(staged.k, shape.k);
  EXPECT_TRUE(cuda::gemm::gemm_n_aligned(staged));
  EXPECT_TRUE(cuda::gemm::tma_addressable(staged));
  int hopper_rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    if (kernel->tier != cuda::gemm::GemmTier::sm90 || !cuda::gemm::gemm_kernel_matches(*kernel, shape, false)) continue;
    if (kernel->split_k) continue;  // refuses a K of one tile for its own reason (gemm_split_k.hpp)
    ++hopper_rows;
    EXPECT_NE(kernel->refusal(shape, device), "") << kernel->name;
    EXPECT_EQ(kernel->refusal(staged, device), "") << kernel->name;
    cuda::gemm::GemmStaging chosen;
    EXPECT_EQ(cuda::gemm::gemm_kernel_refusal(*kernel, shape, device, &chosen), "") << kernel->name;
    EXPECT_TRUE(chosen.pad_n && chosen.b && chosen.c && !chosen.a) << kernel->name;
  }
  if (hopper_rows == 0) GTEST_SKIP() << "this build has no Hopper rows (ATTNKIT_CUDA_ARCHS without 90a)";
}

// Host-only: the staged shape of every layout meets the kernel's rule, and only misaligned operands are staged.
TEST(CudaGemmSelection, StagedShapesAreAlignedAndStageOnlyWhatNeedsIt) {
  for (const DType dtype : {DType::bf16, DType::f32}) {
    for (int layout = 0; layout < 64; ++layout) {
      const int64_t size = static_cast<int64_t>(dtype_size(dtype));
      const int64_t m = layout & 1 ? 37 : 64, n = layout & 2 ? 53 : 128, k = layout & 4 ? 71 : 96;
      std::vector<std::byte> memory(static_cast<size_t>((m * k + k * n + m * n + 64) * size) + 64);
      auto* base = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<int64_t>(memory.data()), 16));
      GemmProblem p;
      auto view = [&](int64_t rows, int64_t cols, bool col_major, std::byte* data) {
        TensorView v;
        v.data = data;
        v.dtype = dtype;
        v.rank = 2;
        v.extents = {rows, cols};
        v.strides = {col_major ? 1 : cols, col_major ? rows : 1};
        return v;
      };
      p.transpose_a = layout & 8, p.transpose_b = layout & 16;
      p.a = view(p.transpose_a ? k : m, p.transpose_a ? m : k, false, base);
      p.b = view(p.transpose_b ? n : k, p.transpose_b ? k : n, false, base + m * k * size);
      p.c = view(m, n, layout & 32, base + (m * k + k * n) * size);
      const cuda::gemm::GemmShape shape = cuda::gemm::describe_gemm(p);
      SCOPED_TRACE("layout " + std::to_string(layout) + " " + std::string(dtype_name(dtype)));
      const cuda::gemm::GemmStaging tma = cuda::gemm::tma_staging(shape);
      EXPECT_TRUE(cuda::gemm::tma_addressable(cuda::gemm::staged_shape(shape, tma)));
      auto address_aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
      const bool a_aligned =
          address_aligned(shape.a) && (shape.a_k_major() ? shape.a_row : shape.a_col) * size % 16 == 0;
      EXPECT_EQ(tma.a, !a_aligned);
      EXPECT_EQ(tma.pad_n, shape.n * size % 16 != 0);
      EXPECT_EQ(tma.c, tma.pad_n || !address_aligned(shape.c) || shape.c_row * size % 16 != 0);
      if (tma.pad_n) {
        EXPECT_TRUE(tma.b) << "N padded: B needs the zero columns";
      }
      const cuda::gemm::GemmShape tma_staged = cuda::gemm::staged_shape(shape, tma);
      EXPECT_TRUE(cuda::gemm::gemm_n_aligned(tma_staged));
      EXPECT_EQ(tma_staged.n, round_up(shape.n, 16 / size));
      EXPECT_EQ(tma_staged.m, shape.m);
      EXPECT_EQ(tma_staged.k, shape.k);
      const cuda::gemm::GemmStaging padded = cuda::gemm::padded_staging(shape);
      const cuda::gemm::GemmShape staged = cuda::gemm::staged_shape(shape, padded);
      EXPECT_TRUE(cuda::gemm::gemm_aligned(staged, 16));
      EXPECT_GE(staged.m, shape.m);
      EXPECT_GE(staged.n, shape.n);
      EXPECT_GE(staged.k, shape.k);
      if (staged.k != shape.k) {
        EXPECT_TRUE(padded.a && padded.b) << "K padded: both operands need the zeros";
      }
      if (staged.m != shape.m || staged.n != shape.n) {
        EXPECT_TRUE(padded.c);
      }
    }
  }
}

TEST(CudaGemmSelection, Fp32SelectsTf32OnlyWhenAllowedAnd3xTf32Otherwise) {
  for (const int capability : {80, 90}) {
    const bool hopper = capability == 90;
    EXPECT_TRUE(starts_with(selected_on(capability, DType::f32, true, 256, 256, 64, false, false, false),
                            hopper ? "sm90_tf32_" : "sm80_tf32_"));
    EXPECT_TRUE(starts_with(selected_on(capability, DType::f32, false, 256, 256, 64, false, true, false),
                            hopper ? "sm90_3xtf32_" : "sm80_3xtf32_"));
  }
}

// fp32 decode shapes (M <= 64 against a weight B, N-contiguous x @ W or K-contiguous x @ W^T) run on the narrow
// kernel's entries of B's majorness on any device: M 1-16 on the SIMT entry with or without TF32 (it is exact fp32),
// M 17-32 and 33-48 on the 3xTF32 entries (fp32-level error) without TF32 (M 49-64 forced or tuned); more rows of A,
// a misaligned B or grids too small to cover the SMs (the split-K rows' small problems) run elsewhere. Its slice
// rule: two CTAs per SM, slices of >= 512 rows.
TEST(CudaGemmSelection, Fp32DecodeShapesSelectTheNarrowKernel) {
  const std::string narrow[2] = {cuda::gemm::narrow_gemm_kernel().name, cuda::gemm::narrow_k_major_gemm_kernel().name};
  const std::string exact[2] = {cuda::gemm::narrow_exact_gemm_kernel().name,
                                cuda::gemm::narrow_k_major_exact_gemm_kernel().name};
  auto tensor_cores = [](bool b_k_major, int64_t m) {
    return std::string(cuda::gemm::narrow_3xtf32_gemm_kernel(b_k_major, m > 32 ? 64 : 32).name);
  };
  auto is_narrow = [&](const std::string& name) {
    for (const bool b_k_major : {false, true}) {
      if (name == narrow[b_k_major] || name == exact[b_k_major] || name == tensor_cores(b_k_major, 32) ||
          name == tensor_cores(b_k_major, 64)) {
        return true;
      }
    }
    return false;
  };
  for (const int capability : {80, 90}) {
    for (const bool tf32 : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{1, 4096, 4096},
                                                                          {16, 4096, 4096},
                                                                          {1, 16384, 4096},
                                                                          {16, 16384, 4096},
                                                                          {5, 4096, 16384},
                                                                          {32, 14336, 4096},
                                                                          {17, 4096, 4096}}) {
          for (const bool transpose_a : {false, true}) {
            const std::string name =
                selected_on(capability, DType::f32, tf32, m, n, k, transpose_a, transpose_b, false);
            // With TF32 allowed the tensor-core rows take M above narrow_tf32_max_rows.
            if (!tf32 || m <= cuda::gemm::narrow_tf32_max_rows(capability)) {
              EXPECT_EQ(name,
                        m >= cuda::gemm::kNarrow3xTf32MinRows ? tensor_cores(transpose_b, m) : narrow[transpose_b])
                  << m << "x" << n << "x" << k << " cc " << capability << " tf32 " << tf32 << " ta " << transpose_a;
            } else {
              EXPECT_FALSE(is_narrow(name)) << name << " " << m << "x" << n << "x" << k;
            }
          }
        }
        for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
                 {33, 16384, 4096}, {48, 4096, 4096}, {49, 4096, 4096}, {64, 4096, 4096}, {64, 16384, 4096}}) {
          for (const bool transpose_a : {false, true}) {
            const std::string name =
                selected_on(capability, DType::f32, tf32, m, n, k, transpose_a, transpose_b, false);
            if (tf32 || m > cuda::gemm::kNarrow3xTf32AutoMaxRows) {
              EXPECT_FALSE(is_narrow(name)) << name << " " << m << "x" << n << "x" << k;
            } else {
              EXPECT_EQ(name, tensor_cores(transpose_b, m)) << m << "x" << n << "x" << k << " cc " << capability;
            }
          }
        }
        for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
                 {65, 16384, 4096}, {16, 512, 4096}, {1, 1024, 2048}, {8, 1024, 512}, {40, 1024, 512}}) {
          const std::string name = selected_on(capability, DType::f32, tf32, m, n, k, false, transpose_b, false);
          EXPECT_FALSE(is_narrow(name)) << name << " " << m << "x" << n << "x" << k;
        }
        // A view one element in: B is not 16-byte aligned.
        EXPECT_FALSE(
            is_narrow(selected_on(capability, DType::f32, tf32, 16, 4096, 4096, false, transpose_b, false, 1)));
        EXPECT_FALSE(is_narrow(selected_on(capability, DType::bf16, false, 16, 4096, 4096, false, transpose_b, false)));
      }
      // x @ W^T with K not a multiple of 4 (16-byte vectors along W's rows): elsewhere.
      EXPECT_FALSE(is_narrow(selected_on(capability, DType::f32, tf32, 16, 4096, 4098, false, true, false)));
    }
  }
  // k-heavy fp32 with more rows: split-K in two slices (64 tiles of 128 x 128), TF32 or 3xTF32.
  bool fp32_split_k = false;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    fp32_split_k = fp32_split_k || (kernel->dtype == DType::f32 && kernel->split_k);
  }
  if (fp32_split_k) {
    for (const bool tf32 : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        const std::string k_heavy = selected_on(90, DType::f32, tf32, 1024, 1024, 16384, false, transpose_b, false);
        EXPECT_TRUE(starts_with(k_heavy, tf32 ? "sm90_tf32_" : "sm90_3xtf32_") &&
                    k_heavy.find("_splitk") != std::string::npos)
            << k_heavy;
      }
    }
  }
  auto slices = [](int64_t m, int64_t n, int64_t k, bool b_k_major = false) {
    cuda::gemm::GemmShape s;
    s.dtype = DType::f32, s.m = m, s.n = n, s.k = k, s.batch = 1;
    s.b_row = b_k_major ? 1 : n, s.b_col = b_k_major ? k : 1;
    return cuda::gemm::narrow_gemm_slices(s, 132);
  };
  EXPECT_EQ(slices(16, 16384, 4096), 2);  // 128 column blocks: 256 CTAs, within two per SM (not 384)
  EXPECT_EQ(slices(1, 4096, 4096), 8);    // 32 blocks: 8 slices of 512
  EXPECT_EQ(slices(1, 4096, 16384), 8);   // 256 CTAs (9 slices were 288: 24 in a second wave)
  EXPECT_EQ(slices(1, 16896, 4096), 2);   // 132 blocks: exactly two per SM
  EXPECT_EQ(slices(3, 16896, 700), 1);    // 132 blocks, K under two slices of 512
  EXPECT_EQ(slices(1, 128, 1 << 20), 32);
  EXPECT_EQ(slices(64, 4096, 4096), 4);  // two row blocks: 64 blocks, 4 slices of 1024 rows
  EXPECT_EQ(slices(5, 4352, 4096), 7);   // 34 blocks: 238 CTAs (8 slices would be 272)
  EXPECT_EQ(slices(48, 16896, 700), 1);
  // B K-major: 32 columns a CTA.
  EXPECT_EQ(slices(16, 16384, 4096, true), 1);  // 512 column blocks
  EXPECT_EQ(slices(1, 4096, 4096, true), 2);    // 128 blocks
  EXPECT_EQ(slices(64, 4096, 4096, true), 1);   // 512 blocks of rows (four of 16) x columns
  EXPECT_EQ(slices(64, 2048, 4096, true), 1);   // 256
  EXPECT_EQ(slices(32, 1024, 4096, true), 4);   // 64: two row blocks of 16 x 32 column blocks
  EXPECT_EQ(slices(16, 1024, 4096, true), 8);   // 32
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
           {1, 4096, 16384}, {16, 16384, 4096}, {7, 16388, 1027}, {64, 4096, 4096}, {29, 14336, 4096}}) {
    const int64_t blocks = (n + 127) / 128 * (m > 32 ? 2 : 1);
    EXPECT_LE(blocks * slices(m, n, k), 2 * 132) << m << "x" << n << "x" << k << ": more than two CTAs per SM";
    EXPECT_GE(blocks * slices(m, n, k), 132) << m << "x" << n << "x" << k;
  }
}

// fp32 decode on Hopper (A K-major, B either majorness): the swapped split-K rows (C^T = B^T A^T on tiles of 128 of N x
// 64 of M) take what the narrow kernel leaves, TF32 from M 5 and 3xTF32 from M 49 to 64, in K slices where the
// weight's tiles leave SMs idle and in one slice where they alone fill the device (N 14336-16384), instead of the
// 128-row tiles; the narrow kernel keeps M <= 4 with TF32 and M <= 48 without (from M 17 on its 3xTF32 entries); M
// 65, unfolded batches, K not a multiple of 4 and pre-Hopper devices run elsewhere. The slice rule of those rows on
// 132 SMs.
TEST(CudaGemmSelection, Fp32DecodeShapesOnHopperSelectTheSwappedSplitKRows) {
  auto slices = [](int64_t m, int64_t n, int64_t k, DType dtype = DType::f32, int64_t batch = 1) {
    cuda::gemm::GemmShape s;
    s.dtype = dtype, s.m = m, s.n = n, s.k = k, s.batch = batch;
    return cuda::gemm::gemm_swapped_split_k_slices(s, 64, 128, 32, 132);
  };
  EXPECT_EQ(slices(16, 16384, 4096), 1);                 // 128 tiles: one slice
  EXPECT_EQ(slices(1, 14336, 4096), 1);                  // 112 tiles
  EXPECT_EQ(slices(64, 16900, 1000), 1);                 // 133 tiles, a partial K tile
  EXPECT_EQ(slices(16, 4096, 16384), 4);                 // 32 tiles: the common rule's 4 slices of 4096
  EXPECT_EQ(slices(64, 4096, 4096), 4);                  // the same
  EXPECT_EQ(slices(16, 8192, 4096), 2);                  // 64 tiles: fp32's two slices
  EXPECT_EQ(slices(65, 16384, 4096), 0);                 // two columns of tiles would read the weight twice
  EXPECT_EQ(slices(16, 16384, 4098), 0);                 // K not a multiple of 4
  EXPECT_EQ(slices(16, 16384, 4096, DType::f32, 2), 0);  // batched
  EXPECT_EQ(slices(16, 16384, 4096, DType::bf16), 0);    // 16-bit: the common rule only
  EXPECT_EQ(slices(16, 4096, 4096, DType::bf16), 4);

  const std::string tf32_rows[2] = {"sm90_tf32_ak_bmn_128x64x32_c1x1_swapped_splitk",
                                    "sm90_tf32_ak_bk_128x64x32_c1x1_swapped_splitk"};
  const std::string exact_rows[2] = {"sm90_3xtf32_ak_bmn_128x64x16_c1x1_swapped_splitk",
                                     "sm90_3xtf32_ak_bk_128x64x16_c1x1_swapped_splitk"};
  int built = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    for (const std::string& row : {tf32_rows[0], tf32_rows[1], exact_rows[0], exact_rows[1]}) {
      built += row == kernel->name ? 1 : 0;
    }
  }
  if (built != 4) GTEST_SKIP() << "this build has no fp32 swapped split-K rows (ATTNKIT_CUDA_ARCHS without 90a)";
  const std::string narrow[2] = {cuda::gemm::narrow_gemm_kernel().name, cuda::gemm::narrow_k_major_gemm_kernel().name};
  for (const bool transpose_b : {false, true}) {
    for (const auto& [n, k] :
         std::vector<std::array<int64_t, 2> >{{4096, 4096}, {16384, 4096}, {4096, 16384}, {14336, 4096}}) {
      for (const int64_t m : {5, 8, 9, 16, 32, 64}) {
        EXPECT_EQ(selected_on(90, DType::f32, true, m, n, k, false, transpose_b, false), tf32_rows[transpose_b])
            << m << "x" << n << "x" << k;
      }
      for (const int64_t m : {33, 48}) {
        EXPECT_EQ(selected_on(90, DType::f32, false, m, n, k, false, transpose_b, false),
                  cuda::gemm::narrow_3xtf32_gemm_kernel(transpose_b, 64).name)
            << m << "x" << n << "x" << k;
      }
      for (const int64_t m : {49, 64}) {
        EXPECT_EQ(selected_on(90, DType::f32, false, m, n, k, false, transpose_b, false), exact_rows[transpose_b])
            << m << "x" << n << "x" << k;
      }
      EXPECT_EQ(selected_on(90, DType::f32, true, 4, n, k, false, transpose_b, false), narrow[transpose_b]);
      EXPECT_EQ(selected_on(90, DType::f32, false, 32, n, k, false, transpose_b, false),
                cuda::gemm::narrow_3xtf32_gemm_kernel(transpose_b, 32).name);
    }
    for (const bool tf32 : {false, true}) {
      const std::string wide = selected_on(90, DType::f32, tf32, 65, 16384, 4096, false, transpose_b, false);
      EXPECT_EQ(wide.find("_swapped_splitk"), std::string::npos) << wide;
      const std::string odd_k = selected_on(90, DType::f32, tf32, 48, 16384, 4098, false, transpose_b, false);
      EXPECT_EQ(odd_k.find("_swapped_splitk"), std::string::npos) << odd_k;
      const std::string ampere = selected_on(80, DType::f32, tf32, 48, 16384, 4096, false, transpose_b, false);
      EXPECT_FALSE(starts_with(ampere, "sm90_")) << ampere;
    }
  }
  // A column-major C [16384 x 40] is the row-major C^T [40 x 16384] = B^T A^T: a decode problem whose weight, A, is
  // K-major as B^T's B' and whose tokens' B^T, K-major, is A'.
  EXPECT_EQ(selected_on(90, DType::f32, false, 16384, 40, 4096, false, true, true),
            cuda::gemm::narrow_3xtf32_gemm_kernel(true, 64).name);
  EXPECT_EQ(selected_on(90, DType::f32, true, 16384, 40, 4096, false, true, true), tf32_rows[1]);
  // A batch of 3 x 16 tokens with its own B each: not folded, batched rows.
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  GemmProblem batched = batched_problem(3, 16, 4096, 4096, 3, 16 * 4096);
  for (TensorView* v : {&batched.a, &batched.b, &batched.c}) v->dtype = DType::f32;
  const std::string name = cuda::gemm::select_gemm_kernel(cuda::gemm::describe_gemm(batched), device, true).name();
  EXPECT_EQ(name.find("_swapped_splitk"), std::string::npos) << name;
}

// 16-bit decode of one row against a weight whose column blocks x K slices cover the SMs, B MN-major, runs on the
// narrow kernel's 16-bit entry, A either majorness, on any device: N 16384 (64 blocks of 256 columns x 4 slices), 8448
// (33 x 8), 14336. Two to five rows (the entry takes up to four, forced or tuned), N 4096 (16 blocks x 8 slices: 128
// CTAs), a B one element off 16 bytes, N not a multiple of 8, and every B K-major (x @ W^T) run elsewhere.
TEST(CudaGemmSelection, Narrow16BitDecodeShapesSelectTheNarrowKernel) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    const std::string narrow = cuda::gemm::narrow_16_bit_gemm_kernel(dtype).name;
    const std::vector<std::array<int64_t, 2> > accepted = {{16384, 4096}, {8448, 4096}, {14336, 4096}};
    for (const int capability : {80, 90}) {
      for (const auto& [n, k] : accepted) {
        for (const bool transpose_a : {false, true}) {
          EXPECT_EQ(selected_on(capability, dtype, false, 1, n, k, transpose_a, false, false), narrow)
              << "1x" << n << "x" << k << " cc " << capability;
          for (const int64_t m : {1, 2, 4}) {
            EXPECT_NE(selected_on(capability, dtype, false, m, n, k, transpose_a, true, false), narrow)
                << m << "x" << n << "x" << k << " B K-major, cc " << capability;
          }
        }
        EXPECT_EQ(selected_on(capability, dtype, false, 2, n, k, false, false, false), narrow) << "2x" << n;
        for (const int64_t m : {3, 4, 5}) {
          EXPECT_NE(selected_on(capability, dtype, false, m, n, k, false, false, false), narrow) << m;
        }
        EXPECT_NE(selected_on(capability, dtype, false, 1, n, k, false, false, false, 1), narrow);
      }
      EXPECT_NE(selected_on(capability, dtype, false, 1, 16388, 4096, false, false, false), narrow);
    }
    EXPECT_NE(selected_on(90, dtype, false, 1, 4096, 4096, false, false, false), narrow);
    // M = 2 with K > N (a down projection) keeps the tensor-core rows; M = 1 takes the narrow kernel there too.
    for (const int capability : {80, 90}) {
      EXPECT_NE(selected_on(capability, dtype, false, 2, 4096, 16384, false, false, false), narrow);
      EXPECT_EQ(selected_on(capability, dtype, false, 1, 4096, 16384, false, false, false), narrow);
    }
  }
  auto slices = [](int64_t m, int64_t n, int64_t k, bool b_k_major) {
    cuda::gemm::GemmShape s;
    s.dtype = DType::bf16, s.m = m, s.n = n, s.k = k, s.batch = 1;
    s.b_row = b_k_major ? 1 : n, s.b_col = b_k_major ? k : 1;
    return cuda::gemm::narrow_gemm_slices(s, 132);
  };
  EXPECT_EQ(slices(1, 16384, 4096, false), 4);  // 64 blocks of 256 columns
  EXPECT_EQ(slices(1, 8448, 4096, false), 8);   // 33 blocks
  EXPECT_EQ(slices(1, 4096, 4096, false), 8);   // 16 blocks: 128 CTAs (refused)
}

// TF32, A K-major and B MN-major on Hopper: the 128 x 128 cooperative row (C^T's tile; the problem's 128 x 128) takes
// the grids that the 128 x 256 row (the problem's 256 of M x 128 of N) pads or leaves idle — a batch of 64 problems of
// M 128 (256-row tiles: half of each padding), 1023 x 1025 x 1027 (36 tiles against 72; N staged) — by the waves
// model; squares from 2048, 1000 x 3000 x 777 and the batched 32 x 512^3 and 8 x 1024^3 keep 128 x 256; x @ W^T (B
// K-major) has no 128 x 128 row.
TEST(CudaGemmSelection, Tf32GridsThe128x256RowPadsRunThe128x128Row) {
  const std::string small = "sm90_tf32_ak_bmn_128x128x32_c1x1_coop", large = "sm90_tf32_ak_bmn_128x256x32_c2x1_coop";
  bool built = false;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) built = built || small == kernel->name;
  if (!built) GTEST_SKIP() << "this build has no TF32 128 x 128 cooperative row (ATTNKIT_CUDA_ARCHS without 90a)";
  EXPECT_EQ(selected_on(90, DType::f32, true, 1023, 1025, 1027, false, false, false), small + "+staged");
  EXPECT_EQ(selected_on(90, DType::f32, true, 2048, 2048, 2048, false, false, false), large);
  EXPECT_EQ(selected_on(90, DType::f32, true, 4096, 4096, 4096, false, false, false), large);
  EXPECT_EQ(selected_on(90, DType::f32, true, 1000, 3000, 776, false, false, false), large);
  EXPECT_FALSE(starts_with(selected_on(90, DType::f32, true, 1023, 1025, 1027, false, true, false), small.c_str()));
  EXPECT_FALSE(starts_with(selected_on(90, DType::f32, false, 1023, 1025, 1027, false, false, false), small.c_str()));
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  auto batched = [&](int64_t batch, int64_t m, int64_t n, int64_t k) {
    GemmProblem p = batched_problem(batch, m, n, k, batch, m * k);
    for (TensorView* v : {&p.a, &p.b, &p.c}) v->dtype = DType::f32;
    return cuda::gemm::select_gemm_kernel(cuda::gemm::describe_gemm(p), device, true).name();
  };
  EXPECT_EQ(batched(64, 128, 4096, 128), small);
  EXPECT_EQ(batched(32, 512, 512, 512), large);
  EXPECT_EQ(batched(8, 1024, 1024, 1024), large);
}

// TF32 x @ W (A K-major, B MN-major) over at least kTransposedBMinRows rows of A (times the batch when B is shared)
// runs the K-major-B rows on a B transposed into the workspace (the MN-major-B rows move B through registers); fewer
// rows, exact fp32, B K-major, A MN-major or an SM80 device keep their rows.
TEST(CudaGemmSelection, Tf32OverManyRowsTransposesBForTheKMajorRows) {
  const std::string transposed = "sm90_tf32_ak_bk_128x256x32_c2x1_coop";
  bool built = false;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) built = built || transposed == kernel->name;
  if (!built) GTEST_SKIP() << "this build has no TF32 K-major-B Hopper row (ATTNKIT_CUDA_ARCHS without 90a)";
  const int64_t rows = cuda::gemm::kTransposedBMinRows;
  EXPECT_EQ(selected_on(90, DType::f32, true, 8192, 8192, 8192, false, false, false), transposed + "+staged");
  EXPECT_EQ(selected_on(90, DType::f32, true, 16384, 14336, 4096, false, false, false), transposed + "+staged");
  EXPECT_EQ(selected_on(90, DType::f32, true, rows, 3000, 777, false, false, false), transposed + "+staged");
  EXPECT_EQ(selected_on(90, DType::f32, true, rows - 1, 4096, 4096, false, false, false).find("_bk_"),
            std::string::npos);
  EXPECT_EQ(selected_on(90, DType::f32, true, 8192, 8192, 8192, false, true, false), transposed);  // B K-major
  for (const std::string& name : {selected_on(90, DType::f32, false, 8192, 8192, 8192, false, false, false),
                                  selected_on(90, DType::f32, true, 8192, 8192, 8192, true, false, false),
                                  selected_on(80, DType::f32, true, 8192, 8192, 8192, false, false, false)}) {
    EXPECT_EQ(name.find("+staged"), std::string::npos) << name;
  }
  // A batch of 8 x 1024 rows sharing B (folded into M 8192), and one whose batches are not packed (M stays 1024,
  // B broadcast: its rows still count eight times).
  const cuda::gemm::GemmDevice device{0, 90, 132, 227 * 1024};
  for (const int64_t gap : {int64_t{0}, int64_t{64}}) {
    GemmProblem p = batched_problem(8, 1024, 2048, 1024, 1, 1024 * 1024 + gap * 1024);
    for (TensorView* v : {&p.a, &p.b, &p.c}) v->dtype = DType::f32;
    EXPECT_EQ(cuda::gemm::select_gemm_kernel(cuda::gemm::describe_gemm(p), device, true).name(), transposed + "+staged")
        << "gap " << gap;
  }

  // The staged shape: B K-major with rows of K rounded to 16 bytes, a batch stride of the padded matrix, an N that is
  // not a multiple of 4 rounded up (pad_n).
  cuda::gemm::GemmShape shape;
  shape.dtype = DType::f32, shape.m = rows, shape.n = 1001, shape.k = 777, shape.batch = 2;
  shape.a_row = 780, shape.a_col = 1, shape.a_batch = rows * 780;
  shape.b_row = 1004, shape.b_col = 1, shape.b_batch = 777 * 1004;
  shape.c_row = 1004, shape.c_batch = rows * 1004;
  shape.a = shape.b = shape.c = reinterpret_cast<void*>(uintptr_t{1} << 40);
  EXPECT_TRUE(cuda::gemm::gemm_transposed_b_pays(shape));
  const cuda::gemm::GemmStaging staging = cuda::gemm::transposed_b_staging(shape);
  EXPECT_TRUE(staging.b && staging.transpose_b && staging.pad_n);
  const cuda::gemm::GemmShape staged = cuda::gemm::staged_shape(shape, staging);
  EXPECT_TRUE(staged.b_k_major());
  EXPECT_EQ(staged.n, 1004);
  EXPECT_EQ(staged.b_col, 780);
  EXPECT_EQ(staged.b_batch, 780 * 1004);
  shape.m = rows - 1;
  EXPECT_FALSE(cuda::gemm::gemm_transposed_b_pays(shape));
}

class CudaGemm : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }
};

// Sizes: single elements, decode-like rows, primes, tails of every tile, several tiles.
const std::vector<std::array<int64_t, 3> > kSizes = {{1, 1, 1},       {1, 64, 64},   {64, 1, 64},    {64, 64, 1},
                                                     {8, 8, 8},       {37, 53, 71},  {136, 264, 72}, {256, 512, 128},
                                                     {129, 257, 200}, {300, 72, 520}};

TEST_P(CudaGemm, MatchesTheOracleForEveryTransposeAndCLayoutOnOddAndAlignedSizes) {
  for (const auto& [m, n, k] : kSizes) {
    for (int layout = 0; layout < 8; ++layout) {
      GemmSpec s;
      s.m = m, s.n = n, s.k = k;
      s.transpose_a = layout & 1;
      s.transpose_b = layout & 2;
      s.c_col_major = layout & 4;
      expect_matches_oracle(s, GetParam(), static_cast<uint64_t>(m * 1000 + layout));
    }
  }
}

TEST_P(CudaGemm, MatchesTheOracleWithColumnMajorStorageOfAAndB) {
  for (int layout = 0; layout < 4; ++layout) {
    GemmSpec s;
    s.m = 136, s.n = 200, s.k = 88;
    s.a_col_major = layout & 1;
    s.b_col_major = layout & 2;
    s.transpose_a = layout == 1;
    expect_matches_oracle(s, GetParam(), 11 + static_cast<uint64_t>(layout));
  }
}

TEST_P(CudaGemm, MatchesTheOracleOnUnalignedViewsAndLeadingDimensions) {
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{64, 64, 64}, {129, 67, 33}, {256, 128, 64}}) {
    for (int layout = 0; layout < 8; ++layout) {
      GemmSpec s;
      s.m = m, s.n = n, s.k = k;
      s.transpose_a = layout & 1;
      s.transpose_b = layout & 2;
      s.c_col_major = layout & 4;
      s.aligned = false;
      expect_matches_oracle(s, GetParam(), 21 + static_cast<uint64_t>(layout));
    }
  }
}

TEST_P(CudaGemm, MatchesTheOracleWithAlphaAndBeta) {
  for (int layout = 0; layout < 4; ++layout) {
    GemmSpec s;
    s.m = 136, s.n = 72, s.k = 96;
    s.transpose_a = layout & 1;
    s.c_col_major = layout & 2;
    s.alpha = 0.5, s.beta = -1.25;
    expect_matches_oracle(s, GetParam(), 31 + static_cast<uint64_t>(layout));
    s.aligned = false;
    expect_matches_oracle(s, GetParam(), 35 + static_cast<uint64_t>(layout));
  }
}

TEST_P(CudaGemm, MatchesTheOracleBatchedAndWithBroadcastBatches) {
  const std::vector<std::array<int64_t, 3> > batches = {{3, 3, 3}, {1, 3, 3}, {3, 1, 3}, {-1, 3, 3}, {3, -1, 3}};
  for (const auto& [ba, bb, bc] : batches) {
    for (int layout = 0; layout < 4; ++layout) {
      GemmSpec s;
      s.m = 72, s.n = 136, s.k = 40;
      s.batch_a = ba, s.batch_b = bb, s.batch_c = bc;
      s.transpose_b = layout & 1;
      s.c_col_major = layout & 2;
      s.beta = layout == 3 ? 0.75 : 0.0;
      expect_matches_oracle(s, GetParam(), 41 + static_cast<uint64_t>(layout));
      s.m = 33, s.n = 17, s.k = 29;
      expect_matches_oracle(s, GetParam(), 45 + static_cast<uint64_t>(layout));
      s.aligned = false;  // staged operands, broadcast batches copied once
      expect_matches_oracle(s, GetParam(), 49 + static_cast<uint64_t>(layout));
    }
  }
}

TEST_P(CudaGemm, KZeroGivesBetaTimesCWithoutReadingAOrB) {
  for (const double beta : {0.0, 0.5}) {
    GemmSpec s;
    s.m = 37, s.n = 24, s.k = 0, s.beta = beta;
    expect_matches_oracle(s, GetParam());
    s.c_col_major = true, s.batch_a = 2, s.batch_b = 2, s.batch_c = 2;
    expect_matches_oracle(s, GetParam());
  }
}

TEST_P(CudaGemm, AlphaZeroNeverReadsAOrB) {
  for (const double beta : {0.0, -2.0}) {
    GemmSpec s;
    s.m = 64, s.n = 64, s.k = 64, s.alpha = 0.0, s.beta = beta, s.nan_operands = true;
    expect_matches_oracle(s, GetParam());
  }
}

TEST_P(CudaGemm, EmptyProblemsWriteNothing) {
  GemmSpec s;
  s.m = 0, s.n = 16, s.k = 16;
  expect_matches_oracle(s, GetParam());
  s.m = 16, s.n = 0;
  expect_matches_oracle(s, GetParam());
  s.n = 16, s.batch_a = 0, s.batch_b = 1, s.batch_c = 0;
  expect_matches_oracle(s, GetParam());
}

TEST_P(CudaGemm, ReplaysFromACudaGraphOnTheCallersStream) {
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{136, 264, 72}, {16, 512, 4096}}) {
    GemmSpec s;
    s.m = m, s.n = n, s.k = k;
    SCOPED_TRACE(s.describe());
    GemmRun run = prepare(s, GetParam(), 51);
    cudaStream_t stream = nullptr;
    expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    RunOptions options;
    options.stream = stream;
    gemm(run.problem, options);  // the plan is made (and kernel attributes set) outside the capture
    expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    test::poison_nan(run.c.host);
    run.c.upload();
    cudaGraph_t graph = nullptr;
    {
      test::StreamCapture capture(stream);
      ASSERT_TRUE(capture.began());
      gemm(run.problem, options);
      graph = capture.end();
    }
    ASSERT_NE(graph, nullptr);
    cudaGraphExec_t exec = nullptr;
    expect_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    expect_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    run.c.download();
    EXPECT_TRUE(run.c.padding_untouched());
    EXPECT_LE(test::relative_l2(run.c.host, run.expected_view), GetParam().tolerance);
  }
}

// A stream-K or split-K plan (a small grid) needs workspace: the caller's when given, else stream-ordered scratch.
TEST_P(CudaGemm, RunsWithTheCallersWorkspaceAndWithout) {
  for (const bool aligned : {true, false}) {
    GemmSpec s;
    s.m = 64, s.n = 256, s.k = 1024, s.aligned = aligned, s.beta = 0.5;
    SCOPED_TRACE(s.describe());
    GemmRun run = prepare(s, GetParam(), 61);
    const int64_t bytes = detail::gemm_plan(run.problem, RunOptions{})->workspace_bytes();
    EXPECT_GE(bytes, 0);
    DeviceBuffer workspace(static_cast<size_t>(bytes) + 256);
    RunOptions options;
    options.workspace = workspace.data();
    options.workspace_bytes = bytes;
    gemm(run.problem, options);
    expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    run.c.download();
    EXPECT_TRUE(run.c.padding_untouched());
    EXPECT_LE(test::relative_l2(run.c.host, run.expected_view), GetParam().tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaGemm, ::testing::Values(kF16, kBF16, kF32, kTF32),
                         [](const ::testing::TestParamInfo<Precision>& info) { return info.param.name; });

class CudaGemmKernelChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }

  // With `kernel` forced (ATTNKIT_GEMM_CONFIG): when it accepts problem `s` on device 0, checks that the plan runs
  // it and that the result matches the oracle, and returns true; false when the kernel refuses the problem.
  static bool forced_run_matches_oracle(const cuda::gemm::GemmKernel& kernel, const GemmSpec& s,
                                        const Precision& precision, uint64_t seed) {
    const GemmRun probe = prepare(s, precision, seed, false, false);
    const cuda::gemm::GemmShape shape = cuda::gemm::describe_gemm(probe.problem);
    cuda::gemm::GemmStaging staging;
    if (!cuda::gemm::gemm_kernel_matches(kernel, shape, precision.allow_tf32) ||
        !cuda::gemm::gemm_kernel_refusal(kernel, shape, cuda::gemm::gemm_device(0), &staging).empty()) {
      return false;
    }
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(detail::gemm_plan(probe.problem, RunOptions{})->config().name.rfind(kernel.name, 0), 0u) << s.describe();
    expect_matches_oracle(s, precision, seed);
    return true;
  }

  // The Hopper row `kernel` forced on each of `sizes`, then on 67 x 131 x 96 (odd M and N, staged) aligned and
  // batched with unaligned views and, with `aligned_batches`, on 130 x 136 x 40 batched and aligned (TMA addresses the
  // batches directly), each in 8 layouts (A and B either majorness, C row- or column-major) with alpha and beta,
  // against the oracle at the row's precision (seeds from seed0); returns how many runs the row accepted.
  static int forced_row_runs(const cuda::gemm::GemmKernel& kernel, const std::vector<std::array<int64_t, 3> >& sizes,
                             uint64_t seed0, bool aligned_batches = false) {
    const Precision& precision = kernel.dtype == DType::f16                  ? kF16
                                 : kernel.dtype == DType::bf16               ? kBF16
                                 : kernel.math == cuda::gemm::GemmMath::tf32 ? kTF32
                                                                             : kF32;
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
    detail::clear_gemm_plans();
    int runs = 0;
    for (size_t i = 0; i < sizes.size() + (aligned_batches ? 3 : 2); ++i) {
      for (int layout = 0; layout < 8; ++layout) {
        GemmSpec s;
        if (i < sizes.size()) {
          s.m = sizes[i][0], s.n = sizes[i][1], s.k = sizes[i][2];
        } else if (i < sizes.size() + 2) {
          s.m = 67, s.n = 131, s.k = 96;
          s.aligned = i == sizes.size();
          if (!s.aligned) s.batch_a = 3, s.batch_b = layout % 3 == 0 ? 1 : 3, s.batch_c = 3;
        } else {
          s.m = 130, s.n = 136, s.k = 40;
          s.batch_a = layout % 2 == 0 ? 2 : -1, s.batch_b = 2, s.batch_c = 2;
        }
        s.transpose_a = layout & 1, s.transpose_b = layout & 2, s.c_col_major = layout & 4;
        s.beta = (layout + i) % 3 == 0 ? 0.5 : 0.0;
        s.alpha = layout & 1 ? 1.25 : 1.0;
        if (forced_run_matches_oracle(kernel, s, precision, seed0 + i * 8 + static_cast<uint64_t>(layout))) ++runs;
      }
    }
    return runs;
  }

  // On a 132-SM device: the rule runs m x n x k on a row whose name holds `row`, for both 16-bit types and B either
  // majorness, alpha 1.25 and beta -0.5 on one of the B layouts (`beta_with_b_transposed`), against the oracle.
  static void expect_rule_row_matches_oracle(int64_t m, int64_t n, int64_t k, const std::string& row, uint64_t seed0,
                                             bool beta_with_b_transposed) {
    if (cuda::gemm::gemm_device(0).multiprocessors != 132) return;
    for (const Precision& precision : {kF16, kBF16}) {
      for (const bool transpose_b : {false, true}) {
        GemmSpec s;
        s.m = m, s.n = n, s.k = k, s.transpose_b = transpose_b;
        s.alpha = 1.25, s.beta = transpose_b == beta_with_b_transposed ? -0.5 : 0.0;
        const std::string name = plan_kernel(s, precision);
        EXPECT_NE(name.find(row), std::string::npos) << name << " " << s.describe();
        expect_matches_oracle(s, precision, seed0 + (transpose_b ? 1 : 0));
      }
    }
  }

  // forced_row_runs on every Hopper row of a tile_m x tile_n tile; returns how many rows there are.
  static int forced_tile_rows(int tile_m, int tile_n, const std::vector<std::array<int64_t, 3> >& sizes, uint64_t seed0,
                              bool aligned_batches) {
    int rows = 0;
    for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
      if (kernel->tier != cuda::gemm::GemmTier::sm90 || kernel->tile_m != tile_m || kernel->tile_n != tile_n) continue;
      EXPECT_GE(forced_row_runs(*kernel, sizes, seed0, aligned_batches), 2 * static_cast<int>(sizes.size()))
          << kernel->name;
      ++rows;
    }
    detail::clear_gemm_plans();
    return rows;
  }

  // Decode rows, x @ W^T (transpose_b) or x @ W, each forced on kernel_for(m) and run with A either majorness (seed
  // seed0 + 2 i, + 1 with A transposed); returns how many runs the forced kernel accepted.
  struct ForcedDecode {
    int64_t m, n, k;
    double beta;
    const Precision* precision;
  };
  template <class KernelFor>
  static int forced_decode_runs(const std::vector<ForcedDecode>& shapes, KernelFor kernel_for, uint64_t seed0,
                                bool transpose_b) {
    int runs = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const cuda::gemm::GemmKernel& kernel = kernel_for(shapes[i].m);
      const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
      detail::clear_gemm_plans();
      for (const bool transpose_a : {false, true}) {
        GemmSpec s;
        s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.transpose_a = transpose_a;
        s.transpose_b = transpose_b;
        s.alpha = 0.75, s.beta = shapes[i].beta;
        if (forced_run_matches_oracle(kernel, s, *shapes[i].precision, seed0 + i * 2 + (transpose_a ? 1 : 0))) ++runs;
      }
    }
    detail::clear_gemm_plans();
    return runs;
  }
};

TEST_F(CudaGemmKernelChoice, AlignedHalfPrecisionRunsTheHopperKernelOnA90Device) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  for (const Precision& precision : {kF16, kBF16}) {
    for (int layout = 0; layout < 8; ++layout) {
      GemmSpec s;
      s.m = 256, s.n = 256, s.k = 64;
      s.transpose_a = layout & 1;
      s.transpose_b = layout & 2;
      s.c_col_major = layout & 4;
      EXPECT_EQ(plan_kernel(s, precision).rfind("sm90_", 0), 0u) << precision.name << " " << s.describe();
    }
  }
}

TEST_F(CudaGemmKernelChoice, MisalignedProblemsRunStagedOnTensorCores) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  GemmSpec s;
  s.m = 256, s.n = 256, s.k = 64, s.aligned = false;  // leading dimensions of 65 elements, views 1 element in
  for (const Precision& precision : {kF16, kBF16}) {
    const std::string name = plan_kernel(s, precision);
    EXPECT_TRUE(name.rfind("sm90_", 0) == 0 && name.find("+staged") != std::string::npos) << name;
  }
  const std::string f32 = plan_kernel(s, kF32);
  EXPECT_TRUE(f32.rfind("sm90_3xtf32_", 0) == 0 && f32.find("+staged") != std::string::npos) << f32;
}

// Staged runs against the oracle, every layout, with beta (C copied in and out) and batches.
TEST_F(CudaGemmKernelChoice, StagedRunsMatchTheOracle) {
  for (const Precision& precision : {kF16, kBF16, kF32}) {
    for (int layout = 0; layout < 8; ++layout) {
      GemmSpec s;
      s.m = 129, s.n = 67, s.k = 33;
      s.transpose_a = layout & 1, s.transpose_b = layout & 2, s.c_col_major = layout & 4;
      s.aligned = false;
      s.beta = layout % 3 == 0 ? 0.5 : 0.0;
      s.batch_a = layout & 1 ? 1 : 3, s.batch_b = 3, s.batch_c = 3;
      expect_matches_oracle(s, precision, 71 + static_cast<uint64_t>(layout));
    }
  }
}

// An N that is not a multiple of 8 (the canonical N: C's row length) runs on the Hopper rows with B and C
// staged, N rounded up: every transpose and C layout, leading dimensions padded to 8 elements (only N is
// odd: nothing else is staged, and C's padding columns must stay NaN) and unaligned views, beta != 0 (C
// copied in), batched and broadcast batches, N < 8, decode-like grids (stream-K).
// Split-K (small grids, long K), 16-bit and fp32 (TF32 and 3xTF32): every slice count path against the oracle,
// with beta (applied by the ordered sum), both B majorness, a column-major C (swapped), an odd N (staged with N
// padded) and unaligned views.
TEST_F(CudaGemmKernelChoice, SplitKMatchesTheOracle) {
  const bool hopper = device_capability() == 90;
  for (const Precision& precision : {kF16, kBF16, kF32, kTF32}) {
    const std::vector<std::array<int64_t, 3> > sizes = {
        {16, 512, 4096}, {100, 200, 3072}, {1, 1024, 2048}, {16, 1001, 2048}, {256, 128, 8192}};
    for (const auto& [m, n, k] : sizes) {
      for (int layout = 0; layout < 4; ++layout) {
        GemmSpec s;
        s.m = m, s.n = n, s.k = k;
        s.transpose_b = layout & 1;
        s.beta = layout & 2 ? -0.5 : 0.0;
        s.alpha = 0.75;
        if (hopper) {
          const std::string name = plan_kernel(s, precision);
          EXPECT_NE(name.find("_splitk"), std::string::npos) << name << " " << s.describe();
        }
        expect_matches_oracle(s, precision, 131 + static_cast<uint64_t>(layout));
      }
    }
    // C column-major [4096 x 16]: computed as the row-major [16 x 4096] C^T = B^T A^T, both K-major.
    GemmSpec swapped;
    swapped.m = 4096, swapped.n = 16, swapped.k = 2048, swapped.c_col_major = true, swapped.transpose_b = true;
    swapped.beta = 0.25;
    if (hopper) {
      const std::string name = plan_kernel(swapped, precision);
      EXPECT_TRUE(name.find("_splitk") != std::string::npos || name.rfind("narrow_", 0) == 0)
          << name;  // fp32: the narrow kernel
    }
    expect_matches_oracle(swapped, precision, 141);
    GemmSpec unaligned;
    unaligned.m = 24, unaligned.n = 300, unaligned.k = 2048, unaligned.aligned = false, unaligned.beta = 1.0;
    if (hopper) {
      const std::string name = plan_kernel(unaligned, precision);
      EXPECT_TRUE(name.find("_splitk") != std::string::npos && ends_with(name, "+staged")) << name;
    }
    expect_matches_oracle(unaligned, precision, 142);
  }
}

// fp32 split-K in two slices (TF32 and 3xTF32: output tiles that fill at most half the SMs, gemm_split_k.hpp): 48 and
// 50 tiles of 128 x 128, K 256 (slices of 128) and 520 (slices of 260: a partial K tile in each), the canonical B
// either majorness, C row- and column-major (swapped: the same tiles), alpha and beta (applied by the ordered sum).
TEST_F(CudaGemmKernelChoice, Fp32SplitKInTwoSlicesMatchesTheOracle) {
  const bool hopper = device_capability() == 90;
  for (const Precision& precision : {kF32, kTF32}) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{1024, 768, 256}, {640, 1280, 520}}) {
      for (int layout = 0; layout < 4; ++layout) {
        GemmSpec s;
        s.m = m, s.n = n, s.k = k;
        // C^T = op(B)^T op(A)^T for a column-major C: op(B) column-major keeps the canonical A K-major.
        s.c_col_major = layout & 2;
        s.transpose_b = s.c_col_major || (layout & 1);
        s.transpose_a = s.c_col_major && (layout & 1);
        s.alpha = 0.75, s.beta = layout == 1 ? -0.5 : 0.0;
        if (hopper) {
          const std::string name = plan_kernel(s, precision);
          EXPECT_NE(name.find("_splitk"), std::string::npos) << name << " " << s.describe();
        }
        expect_matches_oracle(s, precision, 161 + static_cast<uint64_t>(layout));
      }
    }
  }
}

// TF32 with B MN-major (x @ W) on split-K grids: CUTLASS computes C^T = B^T A^T with the weight read into registers,
// whose loads per multiply-add halve on tiles 256 rows of C tall, so the 128 x 256 split-K row (a tile of 256 x 128 of
// C) runs wherever its tiles pad the output no more than 128 x 128 ones, and the 128 x 128 row where they do; each
// against the oracle with tails of M, N and the K slices, alpha and beta.
TEST_F(CudaGemmKernelChoice, Tf32SplitKWithBMnMajorRunsOnTallTilesWhereTheyPadNoMore) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  struct Case {
    int64_t m, n, k;
    const char* row;
  };
  const std::vector<Case> cases = {{512, 256, 4096, "sm90_tf32_ak_bmn_128x256x32_c1x1_splitk"},
                                   {256, 384, 2080, "sm90_tf32_ak_bmn_128x256x32_c1x1_splitk"},
                                   {384, 256, 3000, "sm90_tf32_ak_bmn_128x128x32_c1x1_splitk"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    GemmSpec s;
    s.m = cases[i].m, s.n = cases[i].n, s.k = cases[i].k;
    s.alpha = 0.75, s.beta = i == 1 ? -0.5 : 0.0;
    EXPECT_EQ(plan_kernel(s, kTF32), cases[i].row) << s.describe();
    expect_matches_oracle(s, kTF32, 171 + static_cast<uint64_t>(i));
  }
  GemmSpec k_heavy;
  k_heavy.m = 1024, k_heavy.n = 1024, k_heavy.k = 16384;
  EXPECT_EQ(plan_kernel(k_heavy, kTF32), "sm90_tf32_ak_bmn_128x256x32_c1x1_splitk");
}

// A grid of a partial last wave that the rule sends to the stream-K row (1024 x 4352 x 1024: 136 tiles of 128 x 256,
// 1.03 waves; 184 of 128 x 192, 1.39; 272 stream-K tiles), and one of a single wave of stream-K tiles over more than
// half the SMs (768 x 1536 x 2048: 72 tiles, 144 of 64 x 128): 16-bit types, B either majorness, alpha and beta,
// against the oracle.
TEST_F(CudaGemmKernelChoice, PartialWaveGridsOnTheStreamKRowMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  if (cuda::gemm::gemm_device(0).multiprocessors != 132) {
    GTEST_SKIP() << "the grid is chosen for 132 SMs; this device has " << cuda::gemm::gemm_device(0).multiprocessors;
  }
  for (const Precision& precision : {kF16, kBF16}) {
    for (const bool transpose_b : {false, true}) {
      for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{{1024, 4352, 1024}, {768, 1536, 2048}}) {
        GemmSpec s;
        s.m = m, s.n = n, s.k = k, s.transpose_b = transpose_b;
        s.alpha = 0.75, s.beta = transpose_b ? 0.5 : 0.0;
        const std::string name = plan_kernel(s, precision);
        EXPECT_NE(name.find("_streamk"), std::string::npos) << name << " " << s.describe();
        expect_matches_oracle(s, precision, 221 + (transpose_b ? 1 : 0) + (m == 768 ? 2 : 0));
      }
    }
  }
}

// The 128 x 192 rows: chosen on 2048 x 3072 x 1024 (256 tiles, two waves of 132 SMs where 128 x 256 leaves 1.45) with
// alpha and beta, then forced on sizes off every tile (M, N, K), short and long K, A and B either majorness, C
// column-major, odd N staged, batches with unaligned views; against the oracle.
TEST_F(CudaGemmKernelChoice, The128x192RowsMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  expect_rule_row_matches_oracle(2048, 3072, 1024, "_128x192x64_c1x1_coop", 231, false);
  const std::vector<std::array<int64_t, 3> > sizes = {
      {37, 53, 71}, {129, 385, 200}, {1000, 1160, 40}, {300, 200, 1100}};
  EXPECT_EQ(forced_tile_rows(128, 192, sizes, 241, false), 4) << "bf16 and f16, B either majorness";
}

// The wide-tile rows (three consumer warp groups, the staged epilogue), 192 x 192 and 192 x 96: each chosen by the rule
// on a grid of one wave (1536 x 3072 x 1024: 128 tiles of 192 x 192; 1536^3: 128 of 192 x 96) with alpha and beta,
// then forced on sizes off every tile (M, N, K; one K step and many), on a grid of more tiles than SMs (each CTA's
// shared output tile reused by its next tile), A and B either majorness, C column-major, odd N staged, batches with
// unaligned views and aligned ones; against the oracle.
TEST_F(CudaGemmKernelChoice, TheWideTileRowsMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  expect_rule_row_matches_oracle(1536, 3072, 1024, "_192x192x64_c1x1_wide", 251, true);
  expect_rule_row_matches_oracle(1536, 1536, 1536, "_192x96x64_c1x1_wide", 281, true);
  for (const int tile_n : {192, 96}) {
    // N one tile and a partial one past the tile; grids of 256 and 176 tiles, so that CTAs run two.
    const std::vector<std::array<int64_t, 3> > sizes = {{37, 53, 71},
                                                        {193, tile_n == 192 ? 392 : 104, 64},
                                                        {1000, 1160, 40},
                                                        {300, 200, 1100},
                                                        {2900, tile_n == 192 ? 3000 : 1000, 136}};
    EXPECT_EQ(forced_tile_rows(192, tile_n, sizes, tile_n == 192 ? 261 : 291, true), 4)
        << "bf16 and f16, B either majorness, 192 x " << tile_n;
  }
}

// The bf16 wide-tile rows with B MN-major (192 x 192 and 192 x 96) on grids of more tiles than SMs (169 and 338: CTAs
// that run two tiles reuse their shared output tile), with beta, one K step: small enough for compute-sanitizer's
// racecheck and memcheck.
TEST_F(CudaGemmKernelChoice, WideTileRowOnMoreTilesThanSmsForSanitizers) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    if (kernel->tile_m != 192 || kernel->dtype != DType::bf16 || kernel->b_k_major != 0) continue;
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel->name);
    detail::clear_gemm_plans();
    GemmSpec s;
    s.m = 2309, s.n = 2496, s.k = 64;  // 13 tiles of M, the last 5 rows tall
    s.alpha = 0.75, s.beta = 0.5;
    EXPECT_TRUE(forced_run_matches_oracle(*kernel, s, kBF16, 271)) << kernel->name << " refused " << s.describe();
    ++rows;
  }
  detail::clear_gemm_plans();
  EXPECT_EQ(rows, 2) << "the bf16 192 x 192 and 192 x 96 rows with B MN-major";
}

// B transposed into the workspace (TF32 K-major-B rows on an MN-major B, forced): every TF32 K-major-B Hopper row
// against the oracle with N, K and M off every tile (N 1001: pad_n's zero rows of B), beta, unaligned views (A and C
// staged beside), batches with their own B and a shared B; then the automatic choice on 4096 rows.
TEST_F(CudaGemmKernelChoice, TransposedBStagingMatchesTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  struct Shape {
    int64_t m, n, k;
    bool aligned;
    double beta;
    int64_t batch_b;  // -1: rank 2
  };
  const std::vector<Shape> shapes = {{129, 67, 33, true, 0.0, -1},     {256, 512, 128, true, 0.5, -1},
                                     {300, 1001, 100, true, -1.0, -1}, {129, 67, 33, false, 0.5, -1},
                                     {96, 136, 72, true, 0.25, 3},     {96, 136, 72, true, 0.0, 1}};
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    if (kernel->tier != cuda::gemm::GemmTier::sm90 || kernel->math != cuda::gemm::GemmMath::tf32 ||
        kernel->b_k_major != 1 || kernel->a_k_major != 1) {
      continue;
    }
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel->name);
    detail::clear_gemm_plans();
    SCOPED_TRACE(kernel->name);
    for (size_t i = 0; i < shapes.size(); ++i) {
      GemmSpec s;
      s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.aligned = shapes[i].aligned;
      s.alpha = 0.75, s.beta = shapes[i].beta;
      if (shapes[i].batch_b > 0) s.batch_a = 3, s.batch_b = shapes[i].batch_b, s.batch_c = 3;
      const GemmRun probe = prepare(s, kTF32, 201 + i, false, false);
      cuda::gemm::GemmStaging staging;
      if (!cuda::gemm::gemm_kernel_refusal(*kernel, cuda::gemm::describe_gemm(probe.problem),
                                           cuda::gemm::gemm_device(0), &staging)
               .empty()) {
        continue;  // split-K and swapped rows take their own grids only
      }
      EXPECT_TRUE(staging.transpose_b) << s.describe();
      EXPECT_EQ(detail::gemm_plan(probe.problem, RunOptions{})->config().name, std::string(kernel->name) + "+staged")
          << s.describe();
      expect_matches_oracle(s, kTF32, 201 + i);
      ++rows;
    }
  }
  detail::clear_gemm_plans();
  EXPECT_GT(rows, 0) << "no TF32 K-major-B Hopper row accepted a shape";
  GemmSpec many;
  many.m = cuda::gemm::kTransposedBMinRows, many.n = 264, many.k = 200, many.beta = 0.5;
  const std::string name = plan_kernel(many, kTF32);
  EXPECT_TRUE(name.find("_ak_bk_") != std::string::npos && ends_with(name, "+staged")) << name;
  expect_matches_oracle(many, kTF32, 211);
}

// The swapped split-K rows (decode: C^T = B^T A^T on tiles of 128 of N x 64 of M, K slices; bf16, f16, TF32 and
// 3xTF32), each forced with ATTNKIT_GEMM_CONFIG against the oracle on decode shapes: M 1, 7, 16 and 64 tokens; N 4096,
// 4160 (a partial 128-row tile of C^T) and 4097 (B and C staged, N padded); K 4096 (4 slices) and 4104 (3 slices of
// 1368: a partial K tile in each); alpha and beta != 0; unaligned views (staged); a column-major C of the transposed
// problem, whose canonical form is the decode shape; and a batch of tokens sharing B (folded into M).
TEST_F(CudaGemmKernelChoice, ForcedSwappedSplitKRowsMatchTheOracleOnDecodeShapes) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  struct Decode {
    int64_t m, n, k;
    bool aligned;
    double beta;
  };
  const std::vector<Decode> shapes = {{1, 4096, 4096, true, 0.0},   {7, 4160, 4104, true, 0.5},
                                      {16, 4096, 4104, true, -1.0}, {64, 4160, 4096, true, 0.25},
                                      {64, 4096, 4096, true, 0.0},  {16, 4097, 4096, true, 0.5},
                                      {7, 4096, 4096, false, 0.5}};
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    if (std::string(kernel->name).find("_swapped_splitk") == std::string::npos) continue;
    const Precision& precision = kernel->dtype == DType::f16                  ? kF16
                                 : kernel->dtype == DType::bf16               ? kBF16
                                 : kernel->math == cuda::gemm::GemmMath::tf32 ? kTF32
                                                                              : kF32;
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel->name);
    detail::clear_gemm_plans();
    int runs = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (const bool transpose_b : {false, true}) {  // x @ W (B MN-major), x @ W^T (B K-major): one is the row's
        GemmSpec s;
        s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.aligned = shapes[i].aligned;
        s.transpose_b = transpose_b;
        s.alpha = 0.75, s.beta = shapes[i].beta;
        if (forced_run_matches_oracle(*kernel, s, precision, 171 + i * 2 + (transpose_b ? 1 : 0))) ++runs;
      }
    }
    for (const bool transpose_a : {false, true}) {  // C column-major [4096 x 16]: C^T = B^T A^T is 16 x 4096
      GemmSpec s;
      s.m = 4096, s.n = 16, s.k = 4096, s.c_col_major = true, s.transpose_b = true, s.transpose_a = transpose_a;
      s.beta = 0.5;
      if (forced_run_matches_oracle(*kernel, s, precision, 191 + (transpose_a ? 1 : 0))) ++runs;
    }
    for (const bool transpose_b : {false, true}) {  // a batch of 3 x 16 tokens sharing B: one problem of 48 rows
      GemmSpec s;
      s.m = 16, s.n = 4096, s.k = 4096, s.transpose_b = transpose_b, s.beta = 0.5;
      s.batch_a = 3, s.batch_b = 1, s.batch_c = 3, s.packed_batches = true;
      if (forced_run_matches_oracle(*kernel, s, precision, 195 + (transpose_b ? 1 : 0))) ++runs;
    }
    // The rows of 16 token columns take M <= 16 in 2 slices (K of two halves of whole 16-byte vectors): M 1 and the
    // two staged shapes, and C column-major (M 16); not M 7 / 16 with K 4104, M 64, nor the 48 packed rows.
    const bool token_rows = std::string(kernel->name).find("x16x64_c1x1_pingpong_swapped") != std::string::npos;
    // Those rows also take a weight whose tiles fill 0.9 to 2 waves in one slice: M 9 x 11008 (172 tiles).
    for (const bool transpose_b : {false, true}) {
      if (!token_rows) break;
      GemmSpec s;
      s.m = 9, s.n = 11008, s.k = 4096, s.transpose_b = transpose_b, s.alpha = 0.75, s.beta = 0.5;
      if (forced_run_matches_oracle(*kernel, s, precision, 197 + (transpose_b ? 1 : 0))) ++runs;
    }
    EXPECT_EQ(runs, token_rows ? 5 : static_cast<int>(shapes.size()) + 2) << kernel->name;
    ++rows;
  }
  detail::clear_gemm_plans();
  if (rows == 0) GTEST_SKIP() << "this build has no swapped split-K rows (ATTNKIT_CUDA_ARCHS without 90a)";
}

// The fp32 swapped split-K rows (TF32, 3xTF32) in one slice (gemm_swapped_split_k_slices: M within the tile's 64
// columns, the weight's tiles alone fill the device), forced against the oracle: M 1, 5, 17, 40 and 64; N 16896 (132
// tiles of 128), 16900 (a partial tile of 4 rows of C^T), 16898 (B and C staged with N padded to 16900) and 14336
// (112 tiles); K 1000, 1028 and 700 (partial K tiles of 32 and 16) and 520; alpha, beta 0 and not; x @ W and x @ W^T
// (one is the row's), A K-major. Every output is NaN before the call and its padding must stay NaN (the oracle
// check). Small enough for compute-sanitizer with --gtest_filter on this test.
TEST_F(CudaGemmKernelChoice, ForcedFp32SwappedRowsInOneSliceMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  struct Decode {
    int64_t m, n, k;
    double alpha, beta;
  };
  const std::vector<Decode> shapes = {{1, 16896, 1000, 1.0, 0.0},
                                      {17, 16900, 1028, 0.75, 0.5},
                                      {64, 16896, 700, 1.25, -1.0},
                                      {40, 14336, 520, 1.0, 0.25},
                                      {5, 16898, 512, 0.5, 0.0}};
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    const std::string name = kernel->name;
    if (kernel->dtype != DType::f32 || name.find("_swapped_splitk") == std::string::npos) continue;
    const Precision& precision = kernel->math == cuda::gemm::GemmMath::tf32 ? kTF32 : kF32;
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel->name);
    detail::clear_gemm_plans();
    int runs = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (const bool transpose_b : {false, true}) {
        GemmSpec s;
        s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.transpose_b = transpose_b;
        s.alpha = shapes[i].alpha, s.beta = shapes[i].beta;
        cuda::gemm::GemmShape shape;
        shape.dtype = DType::f32, shape.m = s.m, shape.n = (s.n + 3) / 4 * 4, shape.k = s.k, shape.batch = 1;
        EXPECT_EQ(cuda::gemm::gemm_swapped_split_k_slices(shape, 64, 128, precision.allow_tf32 ? 32 : 16, 132), 1)
            << s.describe();
        if (forced_run_matches_oracle(*kernel, s, precision, 211 + i * 2 + (transpose_b ? 1 : 0))) ++runs;
      }
    }
    detail::clear_gemm_plans();
    if (cuda::gemm::gemm_device(0).multiprocessors > 132) continue;  // fewer tiles than SMs: the K-slice rule's
    EXPECT_EQ(runs, static_cast<int>(shapes.size())) << name;
    ++rows;
  }
  detail::clear_gemm_plans();
  if (rows == 0) GTEST_SKIP() << "this build has no fp32 swapped split-K rows (or the device has more than 132 SMs)";
}

// What split-K cannot run, the swapped split-K rows refuse and the registry runs elsewhere: a batch of 3 decode
// problems (split-K takes batch 1 only), a K that does not divide into slices of 16-byte multiples (4100), and a
// grid with too many tiles for split-K (M 16 against N 16384); each matches the oracle on the row it runs on.
TEST_F(CudaGemmKernelChoice, DecodeShapesTheSwappedSplitKRowsRefuseRunElsewhere) {
  const bool hopper = device_capability() == 90;
  for (const Precision& precision : {kF16, kBF16}) {
    std::vector<GemmSpec> specs(3);
    specs[0].m = 16, specs[0].n = 4096, specs[0].k = 4096, specs[0].beta = 0.5;
    specs[0].batch_a = 3, specs[0].batch_b = 3, specs[0].batch_c = 3;
    specs[1].m = 7, specs[1].n = 4096, specs[1].k = 4100, specs[1].transpose_b = true;
    specs[2].m = 17, specs[2].n = 16384, specs[2].k = 4096, specs[2].beta = -0.5;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (hopper) {
        const std::string name = plan_kernel(specs[i], precision);
        EXPECT_TRUE(starts_with(name, "sm90_") && name.find("_swapped_splitk") == std::string::npos)
            << name << " " << specs[i].describe();
      }
      expect_matches_oracle(specs[i], precision, 201 + i);
    }
  }
}

// Every Hopper row but split-K (SplitKMatchesTheOracle; its rule admits few shapes) forced with
// ATTNKIT_GEMM_CONFIG against the oracle, on the layouts whose canonical form has the row's majorness (C
// row-major and column-major, i.e. swapped), on odd and aligned sizes: a single tile, tails of every extent, N
// not a multiple of 8 (staged), unaligned views, beta, batches, and grids of more tiles than SMs (each CTA of the
// persistent scheduler runs several tiles; the ping-pong rows' two consumer warp groups alternate them).
// Natural selection gives the 64 x 128 ping-pong rows only problems of at least half the SMs' worth of tiles.
TEST_F(CudaGemmKernelChoice, ForcedHopperRowsMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  const std::vector<std::array<int64_t, 3> > sizes = {{64, 128, 64},    {1, 64, 64},     {37, 53, 71},
                                                      {129, 257, 200},  {256, 512, 128}, {300, 72, 520},
                                                      {1000, 1160, 40}, {1100, 2056, 24}};
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    // fp32 rows: ForcedHopperFp32RowsMatchTheOracle.
    if (kernel->tier != cuda::gemm::GemmTier::sm90 || kernel->split_k || kernel->dtype == DType::f32) continue;
    EXPECT_GE(forced_row_runs(*kernel, sizes, 151), 2 * static_cast<int>(sizes.size())) << kernel->name;
    ++rows;
  }
  detail::clear_gemm_plans();
  EXPECT_GT(rows, 0);
}

TEST_F(CudaGemmKernelChoice, OddNRunsOnTheStagedHopperKernelAndMatchesTheOracle) {
  const bool hopper = device_capability() == 90;
  for (const Precision& precision : {kF16, kBF16}) {
    for (int layout = 0; layout < 8; ++layout) {
      for (const bool aligned : {true, false}) {
        GemmSpec s;
        s.m = 67, s.n = 131, s.k = 72;  // both odd: the canonical N is odd for either C layout
        s.transpose_a = layout & 1, s.transpose_b = layout & 2, s.c_col_major = layout & 4;
        s.aligned = aligned;
        s.beta = layout % 3 == 1 ? -0.75 : 0.0;
        s.alpha = 1.5;
        if (hopper) {
          const std::string name = plan_kernel(s, precision);
          EXPECT_TRUE(starts_with(name, "sm90_") && ends_with(name, "+staged")) << name << " " << s.describe();
        }
        expect_matches_oracle(s, precision, 101 + static_cast<uint64_t>(layout));
      }
    }
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3> >{
             {8, 1, 64}, {16, 3, 40}, {256, 7, 96}, {130, 250, 64}, {5, 1025, 512}, {64, 250, 1024}}) {
      for (const bool transpose_b : {false, true}) {
        GemmSpec s;
        s.m = m, s.n = n, s.k = k, s.transpose_b = transpose_b, s.beta = transpose_b ? 0.5 : 0.0;
        if (hopper) {
          const std::string name = plan_kernel(s, precision);
          EXPECT_TRUE(starts_with(name, "sm90_") && ends_with(name, "+staged")) << name << " " << s.describe();
        }
        expect_matches_oracle(s, precision, 111 + static_cast<uint64_t>(m + n));
      }
    }
    const std::vector<std::array<int64_t, 3> > batches = {{3, 3, 3}, {1, 3, 3}, {3, 1, 3}, {-1, 3, 3}};
    for (const auto& [ba, bb, bc] : batches) {
      for (int layout = 0; layout < 4; ++layout) {
        GemmSpec s;
        s.m = 40, s.n = 37, s.k = 48;
        s.batch_a = ba, s.batch_b = bb, s.batch_c = bc;
        s.transpose_b = layout & 1, s.beta = layout & 2 ? 0.25 : 0.0;
        if (hopper) {
          const std::string name = plan_kernel(s, precision);
          EXPECT_TRUE(starts_with(name, "sm90_") && ends_with(name, "+staged")) << name << " " << s.describe();
        }
        expect_matches_oracle(s, precision, 121 + static_cast<uint64_t>(layout));
      }
    }
  }
}

// The SIMT fallback stays correct for what it still runs (forced on aligned and misaligned problems).
TEST_F(CudaGemmKernelChoice, ForcedSimtFallbackMatchesTheOracle) {
  for (const Precision& precision : {kF16, kBF16, kF32}) {
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, std::string("simt_") + precision.name);
    detail::clear_gemm_plans();
    for (const bool aligned : {true, false}) {
      GemmSpec s;
      s.m = 129, s.n = 67, s.k = 200, s.aligned = aligned, s.transpose_b = true, s.beta = 0.25;
      expect_matches_oracle(s, precision, 81);
    }
  }
  detail::clear_gemm_plans();
}

TEST_F(CudaGemmKernelChoice, Fp32RunsTf32OnlyWhenAllowed) {
  if (device_capability() < 80) GTEST_SKIP() << "the tensor-core fp32 kernels need compute capability 8.0";
  GemmSpec s;
  s.m = 256, s.n = 256, s.k = 64;
  const bool hopper = device_capability() == 90;
  EXPECT_EQ(plan_kernel(s, kTF32).rfind(hopper ? "sm90_tf32_" : "sm80_tf32_", 0), 0u);
  EXPECT_EQ(plan_kernel(s, kF32).rfind(hopper ? "sm90_3xtf32_" : "sm80_3xtf32_", 0), 0u);
}

// A run from a thread where no CUDA context is current (PyTorch's autograd device thread, a fresh
// std::thread): the Hopper kernels' TMA descriptors are encoded by the driver, which needs the device's
// primary context current. Both a plan made on the main thread and one made on the new thread.
TEST_F(CudaGemmKernelChoice, RunsFromAThreadWithNoCudaContextCurrent) {
  for (const Precision& precision : {kBF16, kF16, kF32}) {
    GemmSpec s;
    s.m = 136, s.n = 264, s.k = 72;
    GemmRun run = prepare(s, precision, 91);
    gemm(run.problem);  // the plan is made here
    expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    // Same shape, another C (new pointers: new TMA descriptors), run on a fresh thread.
    std::mt19937_64 rng(1);
    DeviceMatrix other = make_matrix(precision.dtype, {-1, s.m, s.n, false, true}, false, rng);
    GemmProblem on_thread = run.problem;
    on_thread.c = other.device;
    std::string error;
    std::thread([&] {
      try {
        gemm(on_thread);
        expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (thread)");
      } catch (const std::exception& e) {
        error = e.what();
      }
    }).join();
    EXPECT_EQ(error, "") << precision.name;
    other.download();
    EXPECT_LE(test::relative_l2(other.host, run.expected_view), precision.tolerance) << precision.name;
    // A shape first seen on a fresh thread (its plan is made there).
    GemmSpec t;
    t.m = 72, t.n = 200, t.k = 88, t.transpose_b = true;
    GemmRun fresh = prepare(t, precision, 92);
    std::thread([&] {
      try {
        gemm(fresh.problem);
        expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (thread)");
      } catch (const std::exception& e) {
        error = e.what();
      }
    }).join();
    EXPECT_EQ(error, "") << precision.name;
    fresh.c.download();
    EXPECT_LE(test::relative_l2(fresh.c.host, fresh.expected_view), precision.tolerance) << precision.name;
  }
}

// Checks C of `run` against its oracle after the plan wrote it: finite, within `tolerance`, padding untouched.
void expect_run_matches(GemmRun& run, double tolerance, const std::string& what) {
  run.c.download();
  EXPECT_TRUE(run.c.padding_untouched()) << what << ": an element outside C's view was written";
  ASSERT_FALSE(test::any_nan(run.c.host)) << what << ": C holds NaN after the run";
  EXPECT_LE(test::relative_l2(run.c.host, run.expected_view), tolerance) << what;
}

// The precision a Hopper row computes: its dtype, and for fp32 rows whether TF32 is allowed (its math).
const Precision& precision_of(const cuda::gemm::GemmKernel& kernel) {
  if (kernel.dtype == DType::f16) return kF16;
  if (kernel.dtype == DType::bf16) return kBF16;
  return kernel.math == cuda::gemm::GemmMath::tf32 ? kTF32 : kF32;
}

// Whether `kernel` computes problem `s` without staging an operand (a staged operand is a copy in the workspace,
// whose address does not change between runs).
bool accepts_unstaged(const cuda::gemm::GemmKernel& kernel, const GemmSpec& s, const Precision& precision) {
  const GemmRun probe = prepare(s, precision, 1, false, false);
  const cuda::gemm::GemmShape shape = cuda::gemm::describe_gemm(probe.problem);
  cuda::gemm::GemmStaging staging;
  return cuda::gemm::gemm_kernel_matches(kernel, shape, precision.allow_tf32) &&
         cuda::gemm::gemm_kernel_refusal(kernel, shape, cuda::gemm::gemm_device(0), &staging).empty() && !staging.any();
}

// One plan of `row` (forced) run on 12 fresh buffer sets of problem `s` and then on each again in reverse order,
// every run checked against the oracle: more sets than a Hopper runner keeps Params for (gemm_params_cache.hpp:
// 8 workspace / alpha / beta keys, each patched to new operand addresses), with two caller workspaces in turn and
// the stream-ordered one (a workspace address the runner has not seen).
void expect_many_buffer_sets_match_oracle(const char* row, const GemmSpec& s, const Precision& precision) {
  SCOPED_TRACE(std::string(row) + " " + s.describe());
  const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, row);
  detail::clear_gemm_plans();
  constexpr int kSets = 12;
  std::vector<GemmRun> runs;
  runs.reserve(kSets);
  for (int i = 0; i < kSets; ++i) runs.push_back(prepare(s, precision, 300 + static_cast<uint64_t>(i), true));
  const auto plan = detail::gemm_plan(runs[0].problem, RunOptions{});
  ASSERT_EQ(plan->config().name, row);
  const int64_t bytes = plan->workspace_bytes();
  DeviceBuffer workspaces[2] = {DeviceBuffer(static_cast<size_t>(bytes)), DeviceBuffer(static_cast<size_t>(bytes))};
  auto options_for = [&](int i) {
    RunOptions options;
    if (bytes > 0 && i % 3 != 2) {
      options.workspace = workspaces[i % 3].data();
      options.workspace_bytes = bytes;
    }
    return options;
  };
  const double tolerance = precision.allow_tf32 ? kTf32ExactInputTolerance : precision.tolerance;
  for (int pass = 0; pass < 2; ++pass) {
    for (int j = 0; j < kSets; ++j) {
      const int i = pass == 0 ? j : kSets - 1 - j;
      // C as the oracle started from (NaN where beta is 0), not the host copy, which holds the first pass's result
      // since expect_run_matches downloaded it: a second pass started from that computes alpha*A*B + beta*(the
      // first pass's C), about 0.5 relative L2 error against the oracle with beta = 0.5.
      runs[i].c.restore();
      ASSERT_NO_THROW(plan->run(runs[i].problem, options_for(i + pass)));
      expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      expect_run_matches(runs[i], tolerance, "set " + std::to_string(i) + " pass " + std::to_string(pass));
    }
  }
  detail::clear_gemm_plans();
}

// Every Hopper row of the build, forced, runs one plan on many buffer sets (expect_many_buffer_sets_match_oracle)
// with alpha and beta != 0 (C's descriptors are read and written), on the layout of each C majorness whose
// canonical form is the row's without staging (C column-major: the canonical C^T = B^T A^T, A and B exchanged):
// a data-parallel shape of a few tiles with tails, or for split-K rows a small grid with a long K (M and N exchanged
// with C column-major, so that the canonical problem keeps decode's few rows). So every
// schedule, cluster shape and operand type is covered: the 2x1-cluster cooperative rows, ping-pong, stream-K
// (barriers cleared per launch), split-K (A and B patched, the partial sums in the workspace), TF32 rows of
// MN-major B beside K-major A (swapped inside the runner: CUTLASS's A is B^T) and 3xTF32.
TEST_F(CudaGemmKernelChoice, OnePlanRunOnManyBufferSetsMatchesTheOracleOnEach) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  GemmSpec data_parallel;
  data_parallel.m = 136, data_parallel.n = 264, data_parallel.k = 520, data_parallel.alpha = 0.75;
  data_parallel.beta = 0.5;
  GemmSpec small_grid;  // split-K's rule: batch 1, few output tiles, a long K
  small_grid.m = 16, small_grid.n = 512, small_grid.k = 4096, small_grid.beta = -0.5;
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    if (kernel->tier != cuda::gemm::GemmTier::sm90) continue;
    const Precision& precision = precision_of(*kernel);
    for (const bool c_col_major : {false, true}) {
      GemmSpec s = kernel->split_k ? small_grid : data_parallel;
      s.c_col_major = c_col_major;
      // Split-K rows take decode-like M only (the swapped ones: at most 16 or 64 tokens): with C column-major the
      // canonical problem is C^T's, so M and N trade places to keep the row-major case's canonical shape.
      if (c_col_major && kernel->split_k) std::swap(s.m, s.n);
      bool found = false;
      for (int layout = 0; layout < 4 && !found; ++layout) {
        s.transpose_a = layout & 1, s.transpose_b = layout & 2;
        found = accepts_unstaged(*kernel, s, precision);
      }
      EXPECT_TRUE(found) << kernel->name << ": no layout with C " << (c_col_major ? "column" : "row")
                         << "-major runs on it unstaged";
      if (found) expect_many_buffer_sets_match_oracle(kernel->name, s, precision);
    }
    ++rows;
  }
  EXPECT_GT(rows, 0) << "no Hopper row in this build";
}

// A plan made for device 1 runs there while device 0 is current, and leaves device 0 current.
TEST_F(CudaGemmKernelChoice, APlanOfDevice1RunsThereWhileDevice0IsCurrent) {
  int count = 0;
  expect_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 2) GTEST_SKIP() << "needs two CUDA devices (found " << count << ")";
  for (const Precision& precision : {kBF16, kF32}) {
    GemmSpec s;
    s.m = 136, s.n = 264, s.k = 72;
    expect_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
    GemmRun first = prepare(s, precision, 401, true);
    GemmRun second = prepare(s, precision, 402, true);
    for (GemmRun* run : {&first, &second}) {
      for (TensorView* view : {&run->problem.a, &run->problem.b, &run->problem.c}) view->device.index = 1;
    }
    expect_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
    const double tolerance = precision.allow_tf32 ? kTf32ExactInputTolerance : precision.tolerance;
    for (GemmRun* run : {&first, &second}) {
      ASSERT_NO_THROW(gemm(run->problem));
      int current = -1;
      expect_cuda(cudaGetDevice(&current), "cudaGetDevice");
      EXPECT_EQ(current, 0) << "the run left another device current";
      expect_cuda(cudaSetDevice(1), "cudaSetDevice(1)");
      expect_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (device 1)");
      expect_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
      expect_run_matches(*run, tolerance, precision.name);
    }
  }
}

TEST_F(CudaGemmKernelChoice, ProductZeroRunsTheSimtKernel) {
  GemmSpec s;
  s.m = 256, s.n = 256, s.k = 0;
  EXPECT_EQ(plan_kernel(s, kBF16), "simt_bf16");
}

// fp32 on a 9.0 device, host-side: the Hopper TF32 row with allow_tf32 and the Hopper 3xTF32 row without it, on
// aligned problems (directly), odd N (N padded) and misaligned views (staged), in every layout whose canonical A
// is K-major (the dev set's fp32 rows: a=k with b=k or b=mn; a C column-major is computed as C^T = B^T A^T, whose
// A is op(B)^T).
TEST(CudaGemmSelection, Fp32OnA90DeviceSelectsTheHopperTf32RowWhenAllowedAndThe3xTf32RowOtherwise) {
  int layouts = 0;
  for (int layout = 0; layout < 8; ++layout) {
    const bool transpose_a = layout & 1, transpose_b = layout & 2, c_col_major = layout & 4;
    if (!(c_col_major ? transpose_b : !transpose_a)) continue;  // canonical A MN-major: full set only
    ++layouts;
    for (const auto& [m, n, k] :
         std::vector<std::array<int64_t, 3> >{{256, 256, 64}, {136, 264, 72}, {1000, 1160, 40}, {8, 1024, 512}}) {
      const std::string tf32 = selected_on(90, DType::f32, true, m, n, k, transpose_a, transpose_b, c_col_major);
      EXPECT_TRUE(starts_with(tf32, "sm90_tf32_") && !ends_with(tf32, "+staged")) << tf32 << " layout " << layout;
      const std::string f32 = selected_on(90, DType::f32, false, m, n, k, transpose_a, transpose_b, c_col_major);
      EXPECT_TRUE(starts_with(f32, "sm90_3xtf32_") && !ends_with(f32, "+staged")) << f32 << " layout " << layout;
    }
    // Odd extents (N, or M when C is column-major, not a multiple of 4 elements) and a view one element in.
    for (const int64_t offset : {0, 1}) {
      const std::string tf32 =
          selected_on(90, DType::f32, true, 67, 131, 96, transpose_a, transpose_b, c_col_major, offset);
      EXPECT_TRUE(starts_with(tf32, "sm90_tf32_") && ends_with(tf32, "+staged")) << tf32 << " layout " << layout;
      const std::string f32 =
          selected_on(90, DType::f32, false, 67, 131, 96, transpose_a, transpose_b, c_col_major, offset);
      EXPECT_TRUE(starts_with(f32, "sm90_3xtf32_") && ends_with(f32, "+staged")) << f32 << " layout " << layout;
    }
  }
  EXPECT_EQ(layouts, 4);
}

// Every Hopper fp32 row but split-K (tf32, 3xtf32) forced with ATTNKIT_GEMM_CONFIG against the oracle, on the layouts
// whose canonical form has the row's majorness (C row-major and column-major): single elements, M = 1, N = 1, K = 1,
// extents that are no multiple of the tiles (nor of the K tiles, 16 and 32), N not a multiple of 4 (staged, N
// padded), unaligned views (staged), alpha and beta, batches with broadcast operands (directly and staged), and
// grids of more output tiles than SMs (the persistent CTAs run several tiles: the 3xTF32 mainloop's split
// buffers are reused across tiles). Every output is NaN before the call and its padding must stay NaN. Bounds:
// DESIGN §5's, as for every fp32 call (expect_matches_oracle): 3xTF32 1e-5 on general inputs, which a plain TF32
// product (about 2.6e-4) misses; TF32 1e-5 on TF32-exact inputs and 3e-4 on general inputs where the problem has
// at least 2^20 products (kTf32StatisticalProducts). The canonical layouts with an MN-major A are in the full set only.
TEST_F(CudaGemmKernelChoice, ForcedHopperFp32RowsMatchTheOracle) {
  if (device_capability() != 90) GTEST_SKIP() << "the Hopper GEMM runs on compute capability 9.0 only";
  const std::vector<std::array<int64_t, 3> > sizes = {
      {1, 1, 1},      {1, 64, 64},     {64, 1, 64},    {64, 64, 1},      {37, 53, 71},    {129, 257, 200},
      {136, 264, 33}, {256, 512, 128}, {300, 72, 520}, {1000, 1160, 40}, {2100, 2100, 24}};
  int rows = 0;
  for (const cuda::gemm::GemmKernel* kernel : cuda::gemm::gemm_kernels()) {
    // Split-K rows: SplitKMatchesTheOracle (their rule admits few shapes).
    if (kernel->tier != cuda::gemm::GemmTier::sm90 || kernel->dtype != DType::f32 || kernel->split_k) continue;
    const int runs = forced_row_runs(*kernel, sizes, 251, /*aligned_batches=*/true);
    EXPECT_GE(runs, 2 * static_cast<int>(sizes.size())) << kernel->name;
    ++rows;
  }
  detail::clear_gemm_plans();
  EXPECT_GT(rows, 0);
}

// The narrow fp32 kernel (gemm_narrow.hpp) forced against the oracle on decode shapes, A K-major and MN-major, B
// row-major, M from 1 to 32 (the 4-, 16- and 32-row instances): K in 8 and 2 slices (partial sums added by the
// ordered sum, with alpha and beta), K not a multiple of the 256-row chunk (1027, with two slices), N not a
// multiple of the CTA's 128 columns and C's rows padded (16388 of 16392), TF32 allowed (exact fp32 is within both
// bounds), and a batch of tokens sharing B (folded into 15 rows). Every output is NaN before the call (beta 0) and
// its padding must stay NaN.
TEST_F(CudaGemmKernelChoice, ForcedNarrowRowMatchesTheOracleOnDecodeShapes) {
  const cuda::gemm::GemmKernel& kernel = cuda::gemm::narrow_gemm_kernel();
  const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
  detail::clear_gemm_plans();
  struct Decode {
    int64_t m, n, k;
    double alpha, beta;
    const Precision* precision;
  };
  const std::vector<Decode> shapes = {{1, 4096, 4096, 1.0, 0.0, &kF32},    {16, 4096, 4096, 0.75, 0.5, &kF32},
                                      {7, 16388, 1027, 1.25, -1.0, &kF32}, {16, 16384, 4096, 1.0, 0.0, &kF32},
                                      {13, 4096, 16384, 0.5, 0.0, &kTF32}, {32, 4096, 4096, 1.0, 0.25, &kF32},
                                      {29, 14336, 4096, 0.5, 0.0, &kTF32}};
  int runs = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (const bool transpose_a : {false, true}) {
      GemmSpec s;
      s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.transpose_a = transpose_a;
      s.alpha = shapes[i].alpha, s.beta = shapes[i].beta;
      if (forced_run_matches_oracle(kernel, s, *shapes[i].precision, 301 + i * 2 + (transpose_a ? 1 : 0))) ++runs;
    }
  }
  GemmSpec folded;  // 3 x 5 tokens sharing B: one problem of 15 rows
  folded.m = 5, folded.n = 4096, folded.k = 4096, folded.beta = 0.5;
  folded.batch_a = 3, folded.batch_b = 1, folded.batch_c = 3, folded.packed_batches = true;
  if (forced_run_matches_oracle(kernel, folded, kF32, 321)) ++runs;
  detail::clear_gemm_plans();
  if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shapes cover";
  EXPECT_EQ(runs, static_cast<int>(2 * shapes.size()) + 1);
}

// The narrow kernel with K in one slice (alpha * sum + beta * C written by the kernel itself: no partial sums), K
// with a partial 256-row chunk (700), M 3, 5, 24 and 40 (the 4-, 16- and 32-row instances, rows masked; two row
// blocks), both B majorness, on exactly 132 column blocks; small enough for compute-sanitizer.
TEST_F(CudaGemmKernelChoice, NarrowRowInOneSliceMatchesTheOracle) {
  int runs = 0;
  for (const bool transpose_b : {false, true}) {  // B MN-major (132 blocks of 128 columns), K-major (of 32)
    for (const int64_t m : {3, 5, 24, 40}) {
      const bool exact = m > cuda::gemm::kNarrowMaxRows;
      const cuda::gemm::GemmKernel& kernel =
          transpose_b
              ? (exact ? cuda::gemm::narrow_k_major_exact_gemm_kernel() : cuda::gemm::narrow_k_major_gemm_kernel())
              : (exact ? cuda::gemm::narrow_exact_gemm_kernel() : cuda::gemm::narrow_gemm_kernel());
      const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
      detail::clear_gemm_plans();
      for (const bool transpose_a : {false, true}) {
        GemmSpec s;
        s.m = m, s.n = transpose_b ? 4224 : 16896, s.k = 700, s.transpose_a = transpose_a, s.transpose_b = transpose_b;
        s.alpha = 1.5, s.beta = transpose_a ? 0.5 : 0.0;
        const uint64_t seed = 331 + static_cast<uint64_t>(m) * 4 + (transpose_a ? 1 : 0) + (transpose_b ? 2 : 0);
        if (forced_run_matches_oracle(kernel, s, kF32, seed)) ++runs;
      }
    }
  }
  detail::clear_gemm_plans();
  if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shape covers";
  EXPECT_EQ(runs, 16);
}

// The narrow kernel's K-major entries (x @ W^T: W row-major [N, K], lanes along K, warp sums by butterfly; A's chunks
// of 2048 or 512 values of K double-buffered) forced against the oracle: K 4096 in 2 slices, 4100 in 2 slices of 2052
// (rounded up to 16-byte vectors: a shorter last slice), in one slice with M 64 (four row blocks of 16) and K 700,
// 1028 and 8200 (several chunks, a partial last one, with beta), N not a multiple of the CTA's 32 columns (16388,
// C's rows padded), M from 1 to 64 (the 4- and 16-row instances; M 29 and 45 end in a partial row block), TF32
// allowed, A either majorness (16-byte and 4-byte copies of A).
TEST_F(CudaGemmKernelChoice, ForcedNarrowKMajorRowsMatchTheOracle) {
  const std::vector<ForcedDecode> shapes = {{1, 4096, 4096, 0.0, &kF32},   {16, 4096, 4100, 0.5, &kF32},
                                            {7, 16388, 1028, -1.0, &kF32}, {29, 14336, 4096, 0.0, &kTF32},
                                            {32, 16384, 700, 0.25, &kF32}, {64, 2048, 4096, 0.5, &kF32},
                                            {3, 8192, 8200, 0.5, &kF32},   {45, 8192, 1028, 1.0, &kF32}};
  const int runs = forced_decode_runs(
      shapes,
      [](int64_t m) -> const cuda::gemm::GemmKernel& {
        return m > cuda::gemm::kNarrowMaxRows ? cuda::gemm::narrow_k_major_exact_gemm_kernel()
                                              : cuda::gemm::narrow_k_major_gemm_kernel();
      },
      361, true);
  if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shapes cover";
  EXPECT_EQ(runs, static_cast<int>(2 * shapes.size()));
}

// The narrow 3xTF32 entries (x @ W^T and x @ W on mma.sync TF32 with split operands: M 17-32 and M 33-64) forced
// against the oracle within fp32's tolerance: K 4096 in 8 slices, 11008 in 8 (partial 64-value chunks at the slices'
// ends), 1028 in 2 with beta, and 700 in one slice (alpha * sum + beta * C written by the kernel) on 132 column blocks;
// M 17, 20, 24, 29, 32, 33, 45 and 64 (rows masked in the last n-tile); N not a multiple of the CTA's 128 columns
// (4100); A either majorness (strided loads of x's chunks); with W N-major also K 1027 (not a multiple of 4: rows of W
// masked one by one).
TEST_F(CudaGemmKernelChoice, ForcedNarrow3xTf32RowsMatchTheOracle) {
  const std::vector<ForcedDecode> shapes = {{17, 4096, 4096, 0.0, &kF32},  {20, 4096, 11008, 0.0, &kF32},
                                            {29, 16384, 1028, 0.5, &kF32}, {32, 16896, 700, -1.0, &kF32},
                                            {24, 4100, 4096, 0.25, &kF32}, {64, 16384, 4096, 0.0, &kF32},
                                            {33, 16896, 1028, 0.5, &kF32}, {45, 4100, 4096, 1.0, &kF32}};
  for (const bool transpose_b : {true, false}) {
    std::vector<ForcedDecode> layout_shapes = shapes;
    if (!transpose_b) layout_shapes.push_back({40, 16896, 1027, 0.5, &kF32});
    const int runs = forced_decode_runs(
        layout_shapes,
        [transpose_b](int64_t m) -> const cuda::gemm::GemmKernel& {
          return cuda::gemm::narrow_3xtf32_gemm_kernel(transpose_b, m > 32 ? 64 : 32);
        },
        401, transpose_b);
    if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shapes cover";
    EXPECT_EQ(runs, static_cast<int>(2 * layout_shapes.size())) << "transpose_b " << transpose_b;
  }
}

// The narrow kernel's exact-only entry (M 33-64 in two row blocks of 32, the second partly masked) forced against
// the oracle: K in 4 slices and in 2 (of 514 rows: partial chunks), and in one slice with beta; A either majorness.
TEST_F(CudaGemmKernelChoice, ForcedNarrowExactRowMatchesTheOracle) {
  const cuda::gemm::GemmKernel& kernel = cuda::gemm::narrow_exact_gemm_kernel();
  const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
  detail::clear_gemm_plans();
  const std::vector<std::array<int64_t, 3> > shapes = {{64, 4096, 4096}, {33, 8192, 1027}, {48, 16896, 700}};
  int runs = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (const bool transpose_a : {false, true}) {
      GemmSpec s;
      s.m = shapes[i][0], s.n = shapes[i][1], s.k = shapes[i][2], s.transpose_a = transpose_a;
      s.alpha = 0.75, s.beta = i == 0 || transpose_a ? 0.5 : 0.0;
      if (forced_run_matches_oracle(kernel, s, kF32, 341 + i * 2 + (transpose_a ? 1 : 0))) ++runs;
    }
  }
  detail::clear_gemm_plans();
  if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shapes cover";
  EXPECT_EQ(runs, 6);
}

// The narrow kernel's 16-bit entries (M <= 4, B MN-major) forced against the oracle, f16 and bf16, A either majorness:
// 1 x 16384 x 4096 (4 slices of 1024), 4 x 16392 x 2048 with beta (a partial column block, C's rows padded; 4 slices of
// 512), 3 x 8448 x 4104 with a negative beta (8 slices of 513 rows, partial chunks), 2 x 34816 x 300 (136 blocks in one
// slice, C written by the kernel, a partial chunk).
TEST_F(CudaGemmKernelChoice, ForcedNarrow16BitRowsMatchTheOracle) {
  struct Decode {
    int64_t m, n, k;
    double alpha, beta;
  };
  const std::vector<Decode> shapes = {
      {1, 16384, 4096, 1.0, 0.0}, {4, 16392, 2048, 0.75, 0.5}, {3, 8448, 4104, 1.25, -1.0}, {2, 34816, 300, 1.0, 0.0}};
  int runs = 0, expected = 0;
  for (const Precision* precision : {&kF16, &kBF16}) {
    const cuda::gemm::GemmKernel& kernel = cuda::gemm::narrow_16_bit_gemm_kernel(precision->dtype);
    const test::ScopedEnvironment forced(cuda::gemm::kForcedGemmConfigVariable, kernel.name);
    detail::clear_gemm_plans();
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (const bool transpose_a : {false, true}) {
        GemmSpec s;
        s.m = shapes[i].m, s.n = shapes[i].n, s.k = shapes[i].k, s.transpose_a = transpose_a;
        s.alpha = shapes[i].alpha, s.beta = shapes[i].beta;
        if (forced_run_matches_oracle(kernel, s, *precision, 451 + i * 2 + (transpose_a ? 1 : 0))) ++runs;
        ++expected;
      }
    }
  }
  detail::clear_gemm_plans();
  if (cuda::gemm::gemm_device(0).multiprocessors > 132) GTEST_SKIP() << "more SMs than the shapes cover";
  EXPECT_EQ(runs, expected);
}

#endif

}  // namespace
}  // namespace attnkit
