#include "cuda/fmha/fmha_configs.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "attnkit/generated/fmha_kernel_list.hpp"

namespace attnkit::cuda::fmha {

// The entries are the rows of the kernel table (cmake/attnkit_kernels.cmake) that this build compiled,
// in table order: Hopper entries first, so on a 9.0 device they are the defaults of their (dtype, head
// dim, policy).
const std::vector<FmhaKernel>& fmha_forward_kernels() {
  static const std::vector<FmhaKernel> kernels = [] {
    std::vector<FmhaKernel> list;
#define ATTNKIT_FMHA_REGISTER_KERNEL(function, id) list.push_back(function());
    ATTNKIT_FMHA_FORWARD_KERNELS(ATTNKIT_FMHA_REGISTER_KERNEL)
#undef ATTNKIT_FMHA_REGISTER_KERNEL
    return list;
  }();
  return kernels;
}

const char* fmha_policy_name(FmhaPolicyKind policy) { return policy == FmhaPolicyKind::box ? "box" : "list"; }

std::string fmha_config_name(const FmhaConfig& c) {
  return std::string(c.dtype == DType::f16 ? "f16" : "bf16") + "_d" + std::to_string(c.head_dim) + "_m" +
         std::to_string(c.block_m) + "_n" + std::to_string(c.block_n) + "_w" + std::to_string(c.warps) + "_s" +
         std::to_string(c.stages) + "_" + fmha_policy_name(c.policy) + (c.architecture == 90 ? "_sm90" : "");
}

const char* forced_config_name(const char* variable) {
  const char* name = std::getenv(variable);
  return name != nullptr && *name != '\0' ? name : nullptr;
}

bool fmha_architecture_runs_on(int architecture, int capability) {
  return architecture == 90 ? capability == 90 : capability >= architecture;
}

bool fmha_config_runs_on(const FmhaConfig& config, int capability) {
  return fmha_architecture_runs_on(config.architecture, capability);
}

bool fmha_query_tiles_are_power_of_two(const FmhaConfig& config) {
  return (config.block_m & (config.block_m - 1)) == 0;
}

bool fmha_config_serves_neighborhood(const FmhaConfig& config, int64_t token_dims) {
  return (config.block_n & (config.block_n - 1)) == 0 && (fmha_query_tiles_are_power_of_two(config) || token_dims == 1);
}

bool fmha_config_fits(const FmhaConfig& config, const FmhaDevice& device) {
  return fmha_config_runs_on(config, device.capability) && config.smem_bytes <= device.max_shared_bytes_optin &&
         !(device.portable_only && config.architecture == 90);
}

int fmha_compiled_width(DType dtype, int64_t head_dim, int64_t head_dim_v) {
  return narrowest_width(fmha_forward_kernels(), head_dim, head_dim_v,
                         [&](const FmhaConfig& c) { return c.dtype == dtype; });
}

int fmha_width_on_device(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaPolicyKind policy,
                         const FmhaDevice& device) {
  return narrowest_width(fmha_forward_kernels(), head_dim, head_dim_v, [&](const FmhaConfig& c) {
    return c.dtype == dtype && c.policy == policy && fmha_config_fits(c, device);
  });
}

const FmhaKernel* fmha_default_kernel(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaPolicyKind policy,
                                      const FmhaDevice& device) {
  const int width = fmha_width_on_device(dtype, head_dim, head_dim_v, policy, device);
  // ATTNKIT_FMHA_CONFIG=<config name> (benchmarks, config sweeps) forces a registry entry when it can
  // run the call.
  if (const char* forced = forced_config_name(kForcedForwardConfigVariable); forced != nullptr) {
    for (const auto& k : fmha_forward_kernels()) {
      if (k.config.dtype == dtype && k.config.head_dim == width && k.config.policy == policy &&
          fmha_config_fits(k.config, device) && fmha_config_name(k.config) == forced) {
        return &k;
      }
    }
  }
  for (const auto& k : fmha_forward_kernels()) {
    if (k.config.dtype == dtype && k.config.head_dim == width && k.config.policy == policy &&
        fmha_config_fits(k.config, device)) {
      return &k;
    }
  }
  return nullptr;
}

std::string compiled_widths_summary(const std::vector<std::pair<DType, int>>& kernels) {
  std::map<std::string, std::vector<int>> widths;
  for (const auto& [dtype, head_dim] : kernels) {
    auto& list = widths[std::string(dtype_name(dtype))];
    if (std::find(list.begin(), list.end(), head_dim) == list.end()) list.push_back(head_dim);
  }
  std::string text;
  for (auto& [name, list] : widths) {
    std::sort(list.begin(), list.end());
    if (!text.empty()) text += ", ";
    text += name + " {";
    for (std::size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + std::to_string(list[i]);
    text += "}";
  }
  return text.empty() ? "none" : text;
}

std::string fmha_compiled_summary() {
  std::vector<std::pair<DType, int>> kernels;
  for (const auto& k : fmha_forward_kernels()) kernels.emplace_back(k.config.dtype, k.config.head_dim);
  return compiled_widths_summary(kernels);
}

}  // namespace attnkit::cuda::fmha
