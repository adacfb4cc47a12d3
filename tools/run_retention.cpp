// `attnkit run retention`: q, k [B, T, H, Dk], v [B, T, H, Dv] random on the run's device, default
// decays, the chosen form (parallel, chunkwise, recurrent). FLOPs are those of the chosen form's
// algorithm, reported with the formula; --check compares out (and gradients) with the float64
// brute-force reference, which evaluates the definition and ignores the form (reference_slices.hpp).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/retention.hpp"
#include "cli_check.hpp"
#include "cli_errors.hpp"
#include "cli_parse.hpp"
#include "cli_tensor.hpp"
#include "cli_timing.hpp"
#include "reference_slices.hpp"
#include "run_settings.hpp"

namespace attnkit::cli {
namespace {

constexpr double kBackwardFlopFactor = 2.0;

struct FlopCount {
  double flops = 0.0;
  std::string formula;
};

// Causal pairs inside the chunks of length chunk that tile T tokens.
double intra_chunk_pairs(int64_t tokens, int64_t chunk) {
  double pairs = 0.0;
  for (int64_t start = 0; start < tokens; start += chunk) {
    const double c = static_cast<double>(std::min(chunk, tokens - start));
    pairs += c * (c + 1.0) / 2.0;
  }
  return pairs;
}

FlopCount retention_flops(RetentionMode mode, int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, int64_t chunk) {
  const double bh = static_cast<double>(b) * static_cast<double>(h);
  const double state_work = 4.0 * bh * static_cast<double>(t) * static_cast<double>(dk) * static_cast<double>(dv);
  switch (mode) {
    case RetentionMode::parallel: {
      const double pairs = static_cast<double>(t) * static_cast<double>(t + 1) / 2.0;
      return {2.0 * bh * pairs * static_cast<double>(dk + dv), "2*B*H*(T*(T+1)/2)*(Dk+Dv) (causal pairs)"};
    }
    case RetentionMode::chunkwise:
      return {2.0 * bh * intra_chunk_pairs(t, chunk) * static_cast<double>(dk + dv) + state_work,
              "2*B*H*(causal pairs within chunks)*(Dk+Dv) + 4*B*H*T*Dk*Dv (state read and update)"};
    case RetentionMode::recurrent: return {state_work, "4*B*H*T*Dk*Dv (state update k^T v and read q S per token)"};
  }
  return {};
}

HostTensor random_host(DType dtype, const std::vector<int64_t>& extents, std::mt19937_64& rng) {
  HostTensor t(dtype, extents);
  t.fill_uniform(rng);
  return t;
}

HostTensor poisoned_host(DType dtype, const std::vector<int64_t>& extents) {
  HostTensor t(dtype, extents);
  t.poison();
  return t;
}

void poison_and_upload(RunTensor& tensor) {
  tensor.host().poison();
  tensor.upload();
}

}  // namespace

int run_retention(const RunSettings& s, RunContext& context) {
  const auto token_list = parse_extents(s.tokens.empty() ? default_tokens(s.op) : s.tokens, "--tokens");
  if (token_list.size() != 1) {
    throw UsageError("--tokens: '" + s.tokens + "' for retention; allowed: one sequence length T, e.g. 4096");
  }
  const int64_t b = s.batch, t = token_list[0], h = s.heads, dk = s.head_dim;
  const int64_t dv = s.head_dim_v > 0 ? s.head_dim_v : s.head_dim;
  const DType dtype = context.dtype;
  const Device device = context.device;
  const RetentionMode mode = parse_mode(s.mode);
  const std::vector<int64_t> qk_extents{b, t, h, dk}, v_extents{b, t, h, dv};

  RunTensor q(random_host(dtype, qk_extents, context.rng), device);
  RunTensor k(random_host(dtype, qk_extents, context.rng), device);
  RunTensor v(random_host(dtype, v_extents, context.rng), device);
  RunTensor out(poisoned_host(dtype, v_extents), device);

  RetentionForward forward;
  forward.q = q.view();
  forward.k = k.view();
  forward.v = v.view();
  forward.out = out.view();
  forward.mode = mode;
  forward.chunk_size = s.chunk;
  forward.normalize = s.normalize;

  RunReport& report = context.report;
  const char* gamma = "1 - 2^(-5-h)";
  report.line("problem: batch %lld, tokens %lld, heads %lld, Dk %lld, Dv %lld, mode %s, chunk %lld%s, gamma %s",
              static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(h),
              static_cast<long long>(dk), static_cast<long long>(dv), mode_name(mode), static_cast<long long>(s.chunk),
              s.normalize ? ", normalized" : "", gamma);
  report.document()["problem"] = Json{{"batch", b},
                                      {"tokens", t},
                                      {"heads", h},
                                      {"head_dim", dk},
                                      {"head_dim_v", dv},
                                      {"mode", mode_name(mode)},
                                      {"chunk_size", s.chunk},
                                      {"normalize", s.normalize},
                                      {"gamma", gamma}};
  const Timing forward_timing = measure(
      device, s.warmup, s.repeat, [&] { retention_forward(forward, context.options); }, context.progress, "forward");
  const FlopCount count = retention_flops(mode, b, t, h, dk, dv, s.chunk);
  report.line("FLOPs = %s = %.4g; backward counted as %.1fx forward", count.formula.c_str(), count.flops,
              kBackwardFlopFactor);
  report.document()["flops"] =
      Json{{"forward", count.flops}, {"backward", kBackwardFlopFactor * count.flops}, {"formula", count.formula}};
  report_timing(report, "forward", "forward", forward_timing, count.flops);

  std::optional<RunTensor> grad_out, grad_q, grad_k, grad_v;
  RetentionBackward backward;
  if (s.backward) {
    grad_out.emplace(random_host(dtype, v_extents, context.rng), device);
    grad_q.emplace(poisoned_host(dtype, qk_extents), device);
    grad_k.emplace(poisoned_host(dtype, qk_extents), device);
    grad_v.emplace(poisoned_host(dtype, v_extents), device);
    backward.q = forward.q;
    backward.k = forward.k;
    backward.v = forward.v;
    backward.grad_out = grad_out->view();
    backward.grad_q = grad_q->view();
    backward.grad_k = grad_k->view();
    backward.grad_v = grad_v->view();
    backward.mode = mode;
    backward.chunk_size = s.chunk;
    backward.normalize = s.normalize;
    const Timing backward_timing = measure(
        device, s.warmup, s.repeat, [&] { retention_backward(backward, context.options); }, context.progress,
        "backward");
    report_timing(report, "backward", "backward", backward_timing, kBackwardFlopFactor * count.flops);
  }
  if (!s.check) {
    return 0;
  }

  poison_and_upload(out);
  retention_forward(forward, context.options);
  synchronize(device);
  out.download();

  HostTensor q64 = q.host().converted(DType::f64);
  HostTensor k64 = k.host().converted(DType::f64);
  HostTensor v64 = v.host().converted(DType::f64);
  HostTensor out_ref(DType::f64, v_extents);
  RetentionForward reference = forward;
  reference.q = q64.view();
  reference.k = k64.view();
  reference.v = v64.view();
  reference.out = out_ref.view();
  retention_forward_reference_in_slices(reference, context.progress);

  CheckReport check(report);
  const double tolerance = tolerance_for(dtype);
  check.compare("out", out.host(), out_ref, tolerance);

  if (s.backward) {
    for (RunTensor* grad : {&*grad_q, &*grad_k, &*grad_v}) {
      poison_and_upload(*grad);
    }
    retention_backward(backward, context.options);
    synchronize(device);
    for (RunTensor* grad : {&*grad_q, &*grad_k, &*grad_v}) {
      grad->download();
    }
    HostTensor grad_out64 = grad_out->host().converted(DType::f64);
    HostTensor grad_q_ref(DType::f64, qk_extents), grad_k_ref(DType::f64, qk_extents),
        grad_v_ref(DType::f64, v_extents);
    RetentionBackward reference_backward = backward;
    reference_backward.q = reference.q;
    reference_backward.k = reference.k;
    reference_backward.v = reference.v;
    reference_backward.grad_out = grad_out64.view();
    reference_backward.grad_q = grad_q_ref.view();
    reference_backward.grad_k = grad_k_ref.view();
    reference_backward.grad_v = grad_v_ref.view();
    retention_backward_reference_in_slices(reference_backward, context.progress);
    check.compare("grad_q", grad_q->host(), grad_q_ref, tolerance);
    check.compare("grad_k", grad_k->host(), grad_k_ref, tolerance);
    check.compare("grad_v", grad_v->host(), grad_v_ref, tolerance);
  }
  return check.passed() ? 0 : 1;
}

}  // namespace attnkit::cli
