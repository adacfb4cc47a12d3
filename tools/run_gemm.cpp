// `attnkit run gemm`: C = alpha*op(A)*op(B) + beta*C with row-major operands (A stored [k, m] when
// --transpose-a, B stored [n, k] when --transpose-b), batched when --batch > 1. FLOPs = 2*batch*m*n*k.
// --check reruns once from the original C (poisoned instead when beta = 0, which must not read C)
// and compares with the float64 brute-force reference (reference_slices.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "attnkit/gemm.hpp"
#include "cli_check.hpp"
#include "cli_parse.hpp"
#include "cli_tensor.hpp"
#include "cli_timing.hpp"
#include "reference_slices.hpp"
#include "run_settings.hpp"

namespace attnkit::cli {
namespace {

std::vector<int64_t> matrix_extents(int64_t batch, int64_t rows, int64_t cols) {
  if (batch > 1) {
    return {batch, rows, cols};
  }
  return {rows, cols};
}

HostTensor random_host(DType dtype, const std::vector<int64_t>& extents, std::mt19937_64& rng) {
  HostTensor t(dtype, extents);
  t.fill_uniform(rng);
  return t;
}

}  // namespace

int run_gemm(const RunSettings& s, RunContext& context) {
  const DType dtype = context.dtype;
  const Device device = context.device;
  const int64_t batch = s.batch;
  const auto a_extents = s.transpose_a ? matrix_extents(batch, s.k, s.m) : matrix_extents(batch, s.m, s.k);
  const auto b_extents = s.transpose_b ? matrix_extents(batch, s.n, s.k) : matrix_extents(batch, s.k, s.n);
  const auto c_extents = matrix_extents(batch, s.m, s.n);

  RunTensor a(random_host(dtype, a_extents, context.rng), device);
  RunTensor b(random_host(dtype, b_extents, context.rng), device);
  const HostTensor c_initial = random_host(dtype, c_extents, context.rng);
  RunTensor c(c_initial, device);

  GemmProblem problem;
  problem.a = a.view();
  problem.b = b.view();
  problem.c = c.view();
  problem.transpose_a = s.transpose_a;
  problem.transpose_b = s.transpose_b;
  problem.alpha = s.alpha;
  problem.beta = s.beta;
  problem.allow_tf32 = s.allow_tf32;

  RunReport& report = context.report;
  report.line("problem: batch %lld, m %lld, n %lld, k %lld, op(A) = %s, op(B) = %s, alpha %g, beta %g%s",
              static_cast<long long>(batch), static_cast<long long>(s.m), static_cast<long long>(s.n),
              static_cast<long long>(s.k), s.transpose_a ? "A^T" : "A", s.transpose_b ? "B^T" : "B", s.alpha, s.beta,
              s.allow_tf32 ? ", TF32 allowed" : "");
  report.document()["problem"] = Json{{"batch", batch},
                                      {"m", s.m},
                                      {"n", s.n},
                                      {"k", s.k},
                                      {"transpose_a", s.transpose_a},
                                      {"transpose_b", s.transpose_b},
                                      {"alpha", s.alpha},
                                      {"beta", s.beta},
                                      {"allow_tf32", s.allow_tf32}};
  if (s.backward) {
    std::fprintf(stderr, "attnkit: note: gemm has no backward op; --backward ignored\n");
  }
  const Timing timing = measure(
      device, s.warmup, s.repeat, [&] { gemm(problem, context.options); }, context.progress, "gemm");
  const double flops =
      2.0 * static_cast<double>(batch) * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  report.line("FLOPs = 2*batch*m*n*k = %.4g", flops);
  report.document()["flops"] = Json{{"forward", flops}, {"formula", "2*batch*m*n*k"}};
  report_timing(report, "gemm", "forward", timing, flops);
  if (!s.check) {
    return 0;
  }

  c.host() = c_initial;
  if (s.beta == 0.0) {
    c.host().poison();
  }
  c.upload();
  gemm(problem, context.options);
  synchronize(device);
  c.download();

  HostTensor a64 = a.host().converted(DType::f64);
  HostTensor b64 = b.host().converted(DType::f64);
  HostTensor c_ref = c_initial.converted(DType::f64);
  GemmProblem reference = problem;
  reference.a = a64.view();
  reference.b = b64.view();
  reference.c = c_ref.view();
  gemm_reference_in_slices(reference, context.progress);

  CheckReport check(report);
  const bool tf32 = s.allow_tf32 && dtype == DType::f32 && device.type == DeviceType::cuda;
  check.compare("c", c.host(), c_ref, tolerance_for(dtype, tf32));
  return check.passed() ? 0 : 1;
}

}  // namespace attnkit::cli
