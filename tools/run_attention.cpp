// `attnkit run attention|na1d|na2d|na3d|block-sparse|element-sparse`. Builds Q/K/V with random
// values on the run's device, the op's mask (random, seeded, for the sparse ops), times the forward
// (and backward), and with --check compares out, lse (and the gradients) with the float64
// brute-force reference evaluated on the very same input values (reference_slices.hpp).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "attention_pairs.hpp"
#include "attnkit/attention.hpp"
#include "cli_check.hpp"
#include "cli_errors.hpp"
#include "cli_parse.hpp"
#include "cli_tensor.hpp"
#include "cli_timing.hpp"
#include "core/attention_shape.hpp"
#include "reference_slices.hpp"
#include "run_settings.hpp"

namespace attnkit::cli {
namespace {

// The LSE is float32 whatever the input dtype, so it cannot be checked tighter than float32 allows;
// the same bounds float64 gradients, which are computed from that LSE.
constexpr double kFloat32StorageTolerance = 1e-6;
constexpr double kBackwardFlopFactor = 2.5;

struct AttentionSetup {
  std::vector<int64_t> tokens, tokens_kv;
  int64_t heads_kv = 0;
  int64_t head_dim_v = 0;
  AttentionMask mask{};                   // block/element tensors attached later
  std::optional<HostTensor> mask_values;  // block or element mask, bool
  std::string mask_text;
  Json mask_json;  // the same facts as mask_text
};

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) {
    p *= v;
  }
  return p;
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int neighborhood_dims(const std::string& op) {
  if (op == "na1d") {
    return 1;
  }
  if (op == "na2d") {
    return 2;
  }
  if (op == "na3d") {
    return 3;
  }
  return 0;
}

std::string join_flags(const std::vector<bool>& flags) {
  std::string text;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    text += std::string(i ? "x" : "") + (flags[i] ? "1" : "0");
  }
  return text;
}

void build_neighborhood_mask(const RunSettings& s, int dims, AttentionSetup& setup) {
  if (static_cast<int>(setup.tokens.size()) != dims) {
    throw UsageError("--tokens: '" + join_extents(setup.tokens) + "' has " + std::to_string(setup.tokens.size()) +
                     " dimensions; allowed: " + std::to_string(dims) + " for " + s.op);
  }
  const auto kernel = per_dimension(parse_extents(s.kernel_size, "--kernel-size"), dims, "--kernel-size");
  const auto dilation = per_dimension(parse_extents(s.dilation, "--dilation"), dims, "--dilation");
  const auto stride = per_dimension(parse_extents(s.stride, "--stride"), dims, "--stride");
  const auto causal = s.causal_given
                          ? per_dimension(parse_flags(s.causal.empty() ? "1" : s.causal, "--causal"), dims, "--causal")
                          : std::vector<bool>(static_cast<std::size_t>(dims), false);
  setup.mask.kind = MaskKind::neighborhood;
  setup.mask.dims = dims;
  for (int d = 0; d < dims; ++d) {
    setup.mask.neighborhood[d] = NeighborhoodDim{kernel[d], dilation[d], stride[d], causal[d]};
  }
  setup.mask_text = "neighborhood kernel " + join_extents(kernel) + ", dilation " + join_extents(dilation) +
                    ", stride " + join_extents(stride) + ", causal " + join_flags(causal);
  setup.mask_json = Json{{"kind", "neighborhood"},
                         {"kernel_size", kernel},
                         {"dilation", dilation},
                         {"stride", stride},
                         {"causal", causal}};
}

// --mask-path's value (checked by the parser: auto|tiles|scattered).
ElementMaskPath element_mask_path(const std::string& name) {
  if (name == "tiles") return ElementMaskPath::tiles;
  if (name == "scattered") return ElementMaskPath::scattered;
  return ElementMaskPath::automatic;
}

AttentionSetup build_setup(const RunSettings& s, RunContext& context) {
  AttentionSetup setup;
  setup.tokens = parse_extents(s.tokens.empty() ? default_tokens(s.op) : s.tokens, "--tokens");
  setup.tokens_kv = s.tokens_kv.empty() ? setup.tokens : parse_extents(s.tokens_kv, "--tokens-kv");
  if (setup.tokens.size() > 3 || setup.tokens_kv.size() > 3) {
    throw UsageError("--tokens: more than 3 token dimensions; allowed: 1 to 3, e.g. 4096, 64x64, 8x16x16");
  }
  setup.heads_kv = s.heads_kv > 0 ? s.heads_kv : s.heads;
  setup.head_dim_v = s.head_dim_v > 0 ? s.head_dim_v : s.head_dim;
  const int64_t seq_q = product(setup.tokens);
  const int64_t seq_k = product(setup.tokens_kv);

  if (const int dims = neighborhood_dims(s.op); dims > 0) {
    build_neighborhood_mask(s, dims, setup);
  } else if (s.op == "attention") {
    if (s.causal_given) {
      if (!s.causal.empty() && s.causal != "1" && s.causal != "0") {
        throw UsageError("--causal: '" + s.causal + "' for attention; allowed: --causal (a flag), 1 or 0");
      }
      if (s.causal != "0") {
        setup.mask = causal_mask(parse_alignment(s.causal_align));
        const char* alignment = alignment_name(setup.mask.causal_alignment);
        setup.mask_text = std::string("causal (") + alignment + ")";
        setup.mask_json = Json{{"kind", "causal"}, {"causal_alignment", alignment}};
      }
    }
    if (setup.mask_text.empty()) {
      setup.mask_text = "none (dense)";
      setup.mask_json = Json{{"kind", "none"}};
    }
  } else if (s.op == "block-sparse") {
    const auto block = per_dimension(parse_extents(s.block_size, "--block-size"), 2, "--block-size");
    HostTensor values(DType::boolean, {s.batch, s.heads, ceil_div(seq_q, block[0]), ceil_div(seq_k, block[1])});
    values.fill_bernoulli(context.rng, s.density);
    setup.mask.kind = MaskKind::block;
    setup.mask.block_q = block[0];
    setup.mask.block_k = block[1];
    setup.mask_values = std::move(values);
    setup.mask_text = "random block mask, blocks " + join_extents(block) + ", density " + number_text(s.density);
    setup.mask_json = Json{{"kind", "block"}, {"block_size", block}, {"density", s.density}};
  } else if (s.op == "element-sparse") {
    HostTensor values(DType::boolean, {s.batch, s.heads, seq_q, seq_k});
    values.fill_bernoulli(context.rng, s.density);
    setup.mask.kind = MaskKind::element;
    setup.mask_values = std::move(values);
    setup.mask_text = "random element mask, density " + number_text(s.density) + ", path " + s.mask_path;
    setup.mask_json = Json{{"kind", "element"}, {"density", s.density}, {"path", s.mask_path}};
  }
  // Any op takes --mask-path; the library refuses a path other than auto without an element mask.
  setup.mask.element_path = element_mask_path(s.mask_path);
  return setup;
}

std::vector<int64_t> token_tensor_extents(int64_t batch, const std::vector<int64_t>& tokens, int64_t heads,
                                          std::optional<int64_t> dim) {
  std::vector<int64_t> extents{batch};
  extents.insert(extents.end(), tokens.begin(), tokens.end());
  extents.push_back(heads);
  if (dim) {
    extents.push_back(*dim);
  }
  return extents;
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

// The mask with its tensor (if any) taken from `values`' view.
AttentionMask with_mask_tensor(AttentionMask mask, const TensorView& values) {
  if (mask.kind == MaskKind::block) {
    mask.block_mask = values;
  }
  if (mask.kind == MaskKind::element) {
    mask.element_mask = values;
  }
  return mask;
}

void poison_and_upload(RunTensor& tensor) {
  tensor.host().poison();
  tensor.upload();
}

void report_problem(const RunSettings& s, RunReport& report, const AttentionSetup& setup) {
  report.line("problem: batch %lld, heads %lld (kv %lld), tokens %s (kv %s), head_dim %lld (v %lld)",
              static_cast<long long>(s.batch), static_cast<long long>(s.heads), static_cast<long long>(setup.heads_kv),
              join_extents(setup.tokens).c_str(), join_extents(setup.tokens_kv).c_str(),
              static_cast<long long>(s.head_dim), static_cast<long long>(setup.head_dim_v));
  report.line("mask: %s", setup.mask_text.c_str());
  report.document()["problem"] = Json{{"batch", s.batch},
                                      {"heads", s.heads},
                                      {"heads_kv", setup.heads_kv},
                                      {"tokens", setup.tokens},
                                      {"tokens_kv", setup.tokens_kv},
                                      {"head_dim", s.head_dim},
                                      {"head_dim_v", setup.head_dim_v},
                                      {"mask", setup.mask_json}};
}

}  // namespace

int run_attention(const RunSettings& s, RunContext& context) {
  const AttentionSetup setup = build_setup(s, context);
  const DType dtype = context.dtype;
  const Device device = context.device;
  const auto q_extents = token_tensor_extents(s.batch, setup.tokens, s.heads, s.head_dim);
  const auto k_extents = token_tensor_extents(s.batch, setup.tokens_kv, setup.heads_kv, s.head_dim);
  const auto v_extents = token_tensor_extents(s.batch, setup.tokens_kv, setup.heads_kv, setup.head_dim_v);
  const auto out_extents = token_tensor_extents(s.batch, setup.tokens, s.heads, setup.head_dim_v);
  const auto lse_extents = token_tensor_extents(s.batch, setup.tokens, s.heads, std::nullopt);

  RunTensor q(random_host(dtype, q_extents, context.rng), device);
  RunTensor k(random_host(dtype, k_extents, context.rng), device);
  RunTensor v(random_host(dtype, v_extents, context.rng), device);
  RunTensor out(poisoned_host(dtype, out_extents), device);
  RunTensor lse(poisoned_host(DType::f32, lse_extents), device);
  std::optional<RunTensor> mask_tensor;
  if (setup.mask_values) {
    mask_tensor.emplace(*setup.mask_values, device);
  }

  AttentionForward forward;
  forward.q = q.view();
  forward.k = k.view();
  forward.v = v.view();
  forward.out = out.view();
  forward.lse = lse.view();
  forward.mask = with_mask_tensor(setup.mask, mask_tensor ? mask_tensor->view() : TensorView{});

  RunReport& report = context.report;
  report_problem(s, report, setup);
  const Timing forward_timing = measure(
      device, s.warmup, s.repeat, [&] { attention_forward(forward, context.options); }, context.progress, "forward");
  const auto shape = detail::describe_attention(forward.q, forward.k, forward.v, forward.scale);
  const double pairs = attended_pairs(setup.mask, shape, setup.mask_values ? &*setup.mask_values : nullptr);
  const double forward_flops = 2.0 * pairs * static_cast<double>(shape.head_dim + shape.head_dim_v);
  const double attended_fraction = pairs / (static_cast<double>(shape.batch * shape.heads_q) *
                                            static_cast<double>(shape.seq_q) * static_cast<double>(shape.seq_k));
  report.line(
      "attended pairs: %.0f over batch and heads (%.4g%% of Sq*Sk); FLOPs = 2*pairs*(D+Dv), "
      "i.e. 4*B*Hq*pairs*D when Dv = D; backward counted as %.1fx forward",
      pairs, 100.0 * attended_fraction, kBackwardFlopFactor);
  report.document()["problem"]["attended_pairs"] = pairs;
  report.document()["problem"]["attended_fraction"] = attended_fraction;
  report.document()["flops"] = Json{
      {"forward", forward_flops}, {"backward", kBackwardFlopFactor * forward_flops}, {"formula", "2*pairs*(D+Dv)"}};
  report_timing(report, "forward", "forward", forward_timing, forward_flops);

  std::optional<RunTensor> grad_out, grad_q, grad_k, grad_v;
  AttentionBackward backward;
  if (s.backward) {
    grad_out.emplace(random_host(dtype, out_extents, context.rng), device);
    grad_q.emplace(poisoned_host(dtype, q_extents), device);
    grad_k.emplace(poisoned_host(dtype, k_extents), device);
    grad_v.emplace(poisoned_host(dtype, v_extents), device);
    backward.q = forward.q;
    backward.k = forward.k;
    backward.v = forward.v;
    backward.out = forward.out;
    backward.lse = forward.lse;
    backward.grad_out = grad_out->view();
    backward.grad_q = grad_q->view();
    backward.grad_k = grad_k->view();
    backward.grad_v = grad_v->view();
    backward.mask = forward.mask;
    const Timing backward_timing = measure(
        device, s.warmup, s.repeat, [&] { attention_backward(backward, context.options); }, context.progress,
        "backward");
    report_timing(report, "backward", "backward", backward_timing, kBackwardFlopFactor * forward_flops);
  }
  if (!s.check) {
    return 0;
  }

  // One more run on poisoned outputs, so the check also sees whether every element was written.
  poison_and_upload(out);
  poison_and_upload(lse);
  attention_forward(forward, context.options);
  synchronize(device);
  out.download();
  lse.download();

  HostTensor q64 = q.host().converted(DType::f64);
  HostTensor k64 = k.host().converted(DType::f64);
  HostTensor v64 = v.host().converted(DType::f64);
  HostTensor out_ref(DType::f64, out_extents);
  HostTensor lse_ref(DType::f32, lse_extents);
  std::optional<HostTensor> mask_host = setup.mask_values;
  AttentionForward reference;
  reference.q = q64.view();
  reference.k = k64.view();
  reference.v = v64.view();
  reference.out = out_ref.view();
  reference.lse = lse_ref.view();
  reference.mask = with_mask_tensor(setup.mask, mask_host ? mask_host->view() : TensorView{});
  attention_forward_reference_in_slices(reference, context.progress);

  CheckReport check(report);
  const double tolerance = tolerance_for(dtype);
  check.compare("out", out.host(), out_ref, tolerance);
  check.compare("lse", lse.host(), lse_ref, std::max(tolerance, kFloat32StorageTolerance));

  if (s.backward) {
    for (RunTensor* grad : {&*grad_q, &*grad_k, &*grad_v}) {
      poison_and_upload(*grad);
    }
    attention_backward(backward, context.options);
    synchronize(device);
    for (RunTensor* grad : {&*grad_q, &*grad_k, &*grad_v}) {
      grad->download();
    }

    HostTensor grad_out64 = grad_out->host().converted(DType::f64);
    HostTensor grad_q_ref(DType::f64, q_extents), grad_k_ref(DType::f64, k_extents), grad_v_ref(DType::f64, v_extents);
    AttentionBackward reference_backward;
    reference_backward.q = reference.q;
    reference_backward.k = reference.k;
    reference_backward.v = reference.v;
    reference_backward.out = reference.out;
    reference_backward.lse = reference.lse;
    reference_backward.grad_out = grad_out64.view();
    reference_backward.grad_q = grad_q_ref.view();
    reference_backward.grad_k = grad_k_ref.view();
    reference_backward.grad_v = grad_v_ref.view();
    reference_backward.mask = reference.mask;
    attention_backward_reference_in_slices(reference_backward, context.progress);
    const double grad_tolerance = std::max(tolerance, kFloat32StorageTolerance);
    check.compare("grad_q", grad_q->host(), grad_q_ref, grad_tolerance);
    check.compare("grad_k", grad_k->host(), grad_k_ref, grad_tolerance);
    check.compare("grad_v", grad_v->host(), grad_v_ref, grad_tolerance);
  }
  return check.passed() ? 0 : 1;
}

}  // namespace attnkit::cli
