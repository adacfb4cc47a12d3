// `attnkit tune`'s problem, tuner settings and device, from its options.
#include <memory>
#include <string>

#include "attnkit/error.hpp"
#include "cli_errors.hpp"
#include "cli_parse.hpp"
#include "cpu/tune/cpu_attention_runner.hpp"
#include "tune/device_key.hpp"
#include "tune_options.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/tune/cuda_tuning_runner.hpp"
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#endif

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

TunerSettings settings_from_options(const TuneOptions& o) {
  TunerSettings s = settings_from_environment();
  s.mode = TuneMode::on;  // offline tuning is what was asked for, whatever ATTNKIT_TUNE says
  s.deterministic = false;
  s.thorough_mode_forward = s.thorough_mode_backward = o.thorough;
  s.top_k = o.top_k;
  s.margin = o.margin;
  s.warmup_steps_forward = s.warmup_steps_backward = o.warmup;
  s.steps_forward = s.steps_backward = o.steps;
  if (!o.dir.empty()) s.cache_dir = o.dir;
  return s;
}

#if defined(ATTNKIT_WITH_CUDA)
constexpr int kDevice = 0;  // offline CUDA tuning runs on the first device (CUDA_VISIBLE_DEVICES picks it)
#endif

}  // namespace

ProblemSpec problem_from_options(const TuneOptions& o) {
  ProblemSpec s;
  s.op = o.backward ? TuneOp::attention_backward : TuneOp::attention_forward;
  s.dtype = parse_dtype(o.dtype);
  s.batch = o.batch;
  s.heads_q = o.heads;
  s.heads_kv = o.heads_kv > 0 ? o.heads_kv : o.heads;
  s.head_dim = o.head_dim;
  s.head_dim_v = o.head_dim_v > 0 ? o.head_dim_v : o.head_dim;
  const std::string token_text = o.tokens.empty() ? default_tokens(o.op) : o.tokens;
  const auto tokens = parse_extents(token_text, "--tokens");
  const auto tokens_kv = o.tokens_kv.empty() ? tokens : parse_extents(o.tokens_kv, "--tokens-kv");
  if (tokens.size() > 3 || tokens_kv.size() != tokens.size()) {
    throw UsageError("--tokens/--tokens-kv: " + token_text + " / " + o.tokens_kv +
                     "; allowed: 1 to 3 extents, the same count for both");
  }
  s.token_dims = static_cast<int32_t>(tokens.size());
  for (size_t d = 0; d < tokens.size(); ++d) {
    s.tokens[d] = tokens[d];
    s.tokens_kv[d] = tokens_kv[d];
  }
  if (o.op == "attention") {
    if (o.causal_given && !o.causal.empty() && o.causal != "1" && o.causal != "0") {
      throw UsageError("--causal: '" + o.causal + "' for attention; allowed: --causal (a flag), 1 or 0");
    }
    s.mask = o.causal_given && o.causal != "0" ? MaskKind::causal : MaskKind::none;
    s.causal_alignment = parse_alignment(o.causal_align);
  } else if (o.op == "na1d" || o.op == "na2d" || o.op == "na3d") {
    const int dims = o.op[2] - '0';
    if (s.token_dims != dims) {
      throw UsageError("--tokens: " + token_text + " has " + std::to_string(s.token_dims) + " extents but " + o.op +
                       " needs " + std::to_string(dims));
    }
    s.mask = MaskKind::neighborhood;
    const auto kernel = per_dimension(parse_extents(o.kernel_size, "--kernel-size"), dims, "--kernel-size");
    const auto dilation = per_dimension(parse_extents(o.dilation, "--dilation"), dims, "--dilation");
    const auto stride = per_dimension(parse_extents(o.stride, "--stride"), dims, "--stride");
    const auto causal = per_dimension(parse_flags(!o.causal_given    ? "0"
                                                  : o.causal.empty() ? "1"
                                                                     : o.causal,
                                                  "--causal"),
                                      dims, "--causal");
    for (int d = 0; d < dims; ++d) {
      const auto i = static_cast<size_t>(d);
      s.neighborhood[i] = NeighborhoodDim{kernel[i], dilation[i], stride[i], causal[i]};
    }
  } else if (o.op == "block-sparse") {
    s.mask = MaskKind::block;
    const auto blocks = per_dimension(parse_extents(o.block_size, "--block-size"), 2, "--block-size");
    s.block_q = blocks[0];
    s.block_k = blocks[1];
    s.density = o.density;
  } else if (o.op == "element-sparse") {
    s.mask = MaskKind::element;
    s.density = o.density;
  } else {
    throw UsageError("OP: '" + o.op + "'; allowed: attention, na1d, na2d, na3d, block-sparse, element-sparse");
  }
  validate_problem_spec(s);
  return s;
}

OfflineDevice offline_device(const TuneOptions& o) {
  OfflineDevice device;
  device.options.registry = &builtin_config_spaces();
  device.options.settings = settings_from_options(o);
  const Backend backend = parse_backend(o.backend);
  if (backend == Backend::cuda) {
#if defined(ATTNKIT_WITH_CUDA)
    const DeviceDescription description = cuda::fmha::describe_cuda_device(kDevice);
    device.options.device = description.first;
    device.options.limits = description.second;
    const int64_t l2 = cuda::fmha::device_l2_bytes(kDevice);
    device.make_runner = [l2](const ProblemSpec& bucketed) -> std::unique_ptr<Runner> {
      return cuda::make_cuda_tuning_runner(bucketed, kDevice, l2);
    };
    device.processors = std::to_string(description.first.processors) + " SMs";
    return device;
#else
    throw Error(Status::unsupported, "--backend: 'cuda'; this attnkit was built without CUDA; allowed: cpu");
#endif
  }
  if (backend != Backend::cpu) {
    throw Error(Status::unsupported, "--backend: '" + o.backend + "'; allowed: cpu, cuda");
  }
  device.options.device = cpu_device_key(o.threads, *device.options.registry);
  device.options.limits = cpu_device_limits(device.options.device.processors);
  device.make_runner = [](const ProblemSpec& bucketed) -> std::unique_ptr<Runner> {
    return std::make_unique<CpuAttentionRunner>(bucketed);
  };
  device.processors = std::to_string(device.options.device.processors) + " threads";
  return device;
}

}  // namespace attnkit::cli
