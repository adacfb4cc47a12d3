#include "cuda/tune/gemm_config_space.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <set>
#include <string>

#include "cuda/gemm/gemm_registry.hpp"

namespace attnkit::cuda::gemm {
namespace {

// Rates relative to the 16-bit tensor cores' peak (DeviceLimits::peak_flops), from the published figures of
// A100 / H100: TF32 tensor cores run at half the 16-bit rate, 3xTF32 makes three TF32 products per product,
// fp32 FMA on the CUDA cores runs at about 1/16 of the 16-bit tensor rate (A100: 19.5 vs 312 TF/s, H100:
// 67 vs 989).
constexpr double kTf32Rate = 0.5;
constexpr double kFastF32Rate = kTf32Rate / 3.0;
constexpr double kSimtRate = 1.0 / 16.0;
// SM80 rows (mma.sync) on a 9.0 device: wgmma is needed for Hopper's peak; mma.sync reaches about 60 % of it.
constexpr double kSm80OnHopperRate = 0.6;

const unsigned char* const kPlaceholder = reinterpret_cast<const unsigned char*>(uintptr_t{1} << 12);

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// A leading dimension as describe_gemm normalises it: the contiguous extent, or a packed value when the
// other extent is 1 (the stride of an extent-1 dimension addresses nothing).
int64_t leading_dimension(int64_t contiguous, int64_t other) {
  return other == 1 ? round_up(std::max<int64_t>(contiguous, 1), 8) : contiguous;
}

const char* majorness(bool k_major) { return k_major ? "K-major" : "MN-major"; }

std::string majorness_of(int k_major) { return k_major < 0 ? "either" : majorness(k_major == 1); }

std::string architecture_reason(int architecture, int capability) {
  return "built for " + std::string(architecture == 90 ? "sm_90a (compute capability 9.0 only)" : "SM80 and newer") +
         "; the device has compute capability " + std::to_string(capability / 10) + "." +
         std::to_string(capability % 10);
}

double math_rate(const GemmKernel& kernel) {
  switch (kernel.math) {
    case GemmMath::tensor: return 1.0;
    case GemmMath::tf32: return kTf32Rate;
    case GemmMath::fast_f32: return kFastF32Rate;
    case GemmMath::simt: return kSimtRate;
  }
  return kSimtRate;
}

}  // namespace

tune::ProblemSpec gemm_spec_of(const GemmShape& shape, bool allow_tf32) {
  return tune::gemm_problem_spec(shape.dtype, shape.m, shape.n, shape.k, shape.batch, !shape.a_k_major(),
                                 shape.b_k_major(), allow_tf32);
}

bool gemm_spec_allows_tf32(const tune::ProblemSpec& spec) { return (spec.variant & tune::kGemmAllowTf32) != 0; }

GemmShape gemm_tuning_shape(const tune::ProblemSpec& spec) {
  GemmShape s;
  s.dtype = spec.dtype;
  s.m = spec.tokens[0];
  s.n = spec.tokens_kv[0];
  s.k = spec.head_dim;
  s.batch = spec.batch;
  const bool a_k_major = (spec.variant & tune::kGemmATransposed) == 0;
  const bool b_k_major = (spec.variant & tune::kGemmBTransposed) != 0;
  if (a_k_major) {
    s.a_col = 1;
    s.a_row = leading_dimension(s.k, s.m);
  } else {
    s.a_row = 1;
    s.a_col = leading_dimension(s.m, s.k);
  }
  if (b_k_major) {
    s.b_row = 1;
    s.b_col = leading_dimension(s.k, s.n);
  } else {
    s.b_col = 1;
    s.b_row = leading_dimension(s.n, s.k);
  }
  s.c_row = leading_dimension(s.n, s.m);
  if (s.batch > 1) {
    s.a_batch = a_k_major ? s.m * s.a_row : s.k * s.a_col;
    s.b_batch = b_k_major ? s.n * s.b_col : s.k * s.b_row;
    s.c_batch = s.m * s.c_row;
  }
  s.a = kPlaceholder;
  s.b = kPlaceholder;
  s.c = const_cast<unsigned char*>(kPlaceholder);
  return s;
}

GemmDevice gemm_device_of(const tune::DeviceLimits& limits) {
  GemmDevice device;
  device.capability = limits.compute_capability;
  device.multiprocessors = limits.processors;
  device.max_shared_bytes_optin = static_cast<int>(limits.max_smem_per_block);
  return device;
}

std::string gemm_config_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                bool allow_tf32, GemmStaging* staging) {
  *staging = GemmStaging{};
  if (kernel.dtype != shape.dtype) return "built for " + std::string(dtype_name(kernel.dtype));
  if (!gemm_architecture_runs_on(kernel.architecture, device.capability)) {
    return architecture_reason(kernel.architecture, device.capability);
  }
  if (kernel.math == GemmMath::tf32 && !allow_tf32) {
    return "TF32 math (about 1e-3 relative error per product); the problem does not allow TF32";
  }
  if (kernel.exact_only && allow_tf32) {
    return "exact fp32 for shapes where the TF32 rows are faster; the problem allows TF32";
  }
  if (!gemm_kernel_matches(kernel, shape, allow_tf32) && !gemm_kernel_transposes_b(kernel, shape, allow_tf32)) {
    return "built for A " + majorness_of(kernel.a_k_major) + ", B " + majorness_of(kernel.b_k_major) +
           "; the problem has A " + majorness(shape.a_k_major()) + ", B " + majorness(shape.b_k_major());
  }
  return gemm_kernel_refusal(kernel, shape, device, staging);
}

tune::CostEstimate gemm_estimate(const GemmKernel& kernel, const GemmShape& shape, const tune::DeviceLimits& limits) {
  const int processors = std::max(limits.processors, 1);
  const auto m = static_cast<double>(shape.m), n = static_cast<double>(shape.n), k = static_cast<double>(shape.k);
  const auto batch = static_cast<double>(std::max<int64_t>(shape.batch, 1));
  const double element = static_cast<double>(dtype_size(shape.dtype));
  double rate = limits.peak_flops * math_rate(kernel);
  if (kernel.tier == GemmTier::sm80 && limits.compute_capability >= 90) rate *= kSm80OnHopperRate;
  rate = std::max(rate, 1.0);

  tune::CostEstimate cost;
  cost.flops = 2.0 * m * n * k * batch;
  double compute = cost.flops / rate;
  int launches = 1;
  double extra_bytes = 0.0;
  if (kernel.tile_m > 0 && kernel.tile_n > 0) {
    const int64_t tiles = (shape.m + kernel.tile_m - 1) / kernel.tile_m *
                          ((shape.n + kernel.tile_n - 1) / kernel.tile_n) * std::max<int64_t>(shape.batch, 1);
    cost.tiles = tiles;
    cost.waves = (tiles + processors - 1) / processors;
    const double tile_work = static_cast<double>(tiles) * kernel.tile_m * kernel.tile_n * k * 2.0 /
                             (gemm_tile_efficiency(kernel.tile_m, kernel.tile_n) * gemm_row_efficiency(kernel));
    if (kernel.split_k || kernel.stream_k) {
      // The K loops of the output tiles spread evenly over every SM.
      compute = tile_work / rate;
      if (kernel.split_k) {
        const double slices =
            std::clamp<double>(static_cast<double>(processors) / static_cast<double>(tiles), 1.0, 64.0);
        extra_bytes += 2.0 * 4.0 * m * n * batch * slices;  // fp32 partials written and summed
        ++launches;
      }
    } else {
      // gemm_tile_cost: waves x the work of one tile / its efficiency, in multiply-adds at one SM's rate.
      compute = gemm_tile_cost(shape.m, shape.n, shape.k, shape.batch, kernel.tile_m, kernel.tile_n, processors,
                               kernel.overlaps_epilogue, gemm_row_efficiency(kernel), kernel.staged_epilogue) *
                2.0 / (rate / processors);
    }
  }
  GemmStaging staging;
  if (kernel.tier != GemmTier::simt && gemm_kernel_refusal(kernel, shape, gemm_device_of(limits), &staging).empty() &&
      staging.any()) {
    // A staged operand is read and written once more before the kernel (C also copied back after it).
    extra_bytes += 2.0 * element * batch * ((staging.a ? m * k : 0.0) + (staging.b ? k * n : 0.0));
    if (staging.c) extra_bytes += 3.0 * element * batch * m * n;
    launches += staging.c ? 2 : 1;
  }
  cost.bytes = element * batch * (m * k + k * n + m * n) + extra_bytes;
  const double memory = limits.peak_bytes_per_second > 0 ? cost.bytes / limits.peak_bytes_per_second : 0.0;
  cost.seconds = std::max(compute, memory) + launches * limits.launch_overhead_seconds;
  return cost;
}

tune::ConfigSpace gemm_space() {
  tune::ConfigSpace space;
  space.op = tune::TuneOp::gemm;
  space.backend = Backend::cuda;
  space.description =
      "gemm v1: one config per GEMM registry entry (narrow kernels for a few rows of A: fp32, and bf16 / f16 for "
      "M <= 4 with B MN-major; Hopper wgmma/TMA rows: data-parallel, stream-K, split-K; SM80 mma.sync rows; SIMT "
      "fallbacks), named by its row id; operands that miss a row's layout rule are staged";
  std::set<std::string> seen;
  for (const GemmKernel* kernel : gemm_kernels()) {
    tune::Config config;
    config.id = kernel->name;
    if (!seen.insert(config.id).second) continue;  // an entry listed twice adds nothing
    config.params = {{"dtype", static_cast<int64_t>(kernel->dtype)},
                     {"tier", static_cast<int64_t>(kernel->tier)},
                     {"math", static_cast<int64_t>(kernel->math)},
                     {"a_k_major", kernel->a_k_major},
                     {"b_k_major", kernel->b_k_major},
                     {"architecture", kernel->architecture},
                     {"tile_m", kernel->tile_m},
                     {"tile_n", kernel->tile_n},
                     {"stream_k", kernel->stream_k ? 1 : 0},
                     {"split_k", kernel->split_k ? 1 : 0}};
    config.entry = kernel;
    space.configs.push_back(std::move(config));
  }
  space.invalid_reason = [](const tune::Config& config, const tune::ProblemSpec& spec,
                            const tune::DeviceLimits& limits) {
    GemmStaging staging;
    return gemm_config_refusal(*gemm_kernel_of(config), gemm_tuning_shape(spec), gemm_device_of(limits),
                               gemm_spec_allows_tf32(spec), &staging);
  };
  space.estimate = [](const tune::Config& config, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    return gemm_estimate(*gemm_kernel_of(config), gemm_tuning_shape(spec), limits);
  };
  space.default_config = [](const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) -> std::string {
    try {
      const GemmChoice choice =
          select_gemm_kernel(gemm_tuning_shape(spec), gemm_device_of(limits), gemm_spec_allows_tf32(spec));
      return choice.kernel == nullptr ? std::string() : std::string(choice.kernel->name);
    } catch (const std::exception&) {
      return "";  // a forced entry that cannot run the problem: the cheapest predicted config
    }
  };
  return space;
}

void register_gemm_space(tune::ConfigSpaceRegistry& registry) {
  if (!gemm_kernels().empty()) registry.add(gemm_space());
}

}  // namespace attnkit::cuda::gemm
