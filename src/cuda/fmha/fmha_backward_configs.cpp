#include "cuda/fmha/fmha_backward_configs.hpp"

#include <algorithm>
#include <map>

#include "attnkit/generated/fmha_kernel_list.hpp"
#include "cuda/fmha/fmha_configs.hpp"

namespace attnkit::cuda::fmha {

// The entries are the backward rows of the kernel table (cmake/attnkit_kernels.cmake) that this build
// compiled, in table order: the Hopper tier first, since the default is the first entry that fits.
const std::vector<FmhaBackwardKernel>& fmha_backward_kernels() {
  static const std::vector<FmhaBackwardKernel> kernels = [] {
    std::vector<FmhaBackwardKernel> list;
#define ATTNKIT_FMHA_REGISTER_BACKWARD(function, id) list.push_back(function());
    ATTNKIT_FMHA_BACKWARD_KERNELS(ATTNKIT_FMHA_REGISTER_BACKWARD)
#undef ATTNKIT_FMHA_REGISTER_BACKWARD
    return list;
  }();
  return kernels;
}

std::string fmha_backward_config_name(const FmhaBackwardConfig& c) {
  return "bwd_" + std::string(c.dtype == DType::bf16 ? "bf16" : "f16") + "_d" + std::to_string(c.head_dim) + "_m" +
         std::to_string(c.block_m) + "_n" + std::to_string(c.block_n) + "_w" + std::to_string(c.warps) + "_" +
         (c.policy == FmhaBackwardPolicy::box ? "box" : "list") + (c.architecture == 90 ? "_sm90" : "");
}

bool fmha_backward_config_fits(const FmhaBackwardConfig& config, const FmhaDevice& device) {
  return fmha_architecture_runs_on(config.architecture, device.capability) &&
         std::max(config.smem_bytes_dkdv, config.smem_bytes_dq) <= device.max_shared_bytes_optin &&
         !(device.portable_only && config.architecture == 90);
}

int fmha_backward_compiled_width(DType dtype, int64_t head_dim, int64_t head_dim_v) {
  return narrowest_width(fmha_backward_kernels(), head_dim, head_dim_v,
                         [&](const FmhaBackwardConfig& c) { return c.dtype == dtype; });
}

int fmha_backward_width_on_device(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaBackwardPolicy policy,
                                  const FmhaDevice& device) {
  return narrowest_width(fmha_backward_kernels(), head_dim, head_dim_v, [&](const FmhaBackwardConfig& c) {
    return c.dtype == dtype && c.policy == policy && fmha_backward_config_fits(c, device);
  });
}

const FmhaBackwardKernel* fmha_backward_default_kernel(DType dtype, int64_t head_dim, int64_t head_dim_v,
                                                       FmhaBackwardPolicy policy, const FmhaDevice& device) {
  const int width = fmha_backward_width_on_device(dtype, head_dim, head_dim_v, policy, device);
  auto runs = [&](const FmhaBackwardKernel& k) {
    return k.config.dtype == dtype && k.config.head_dim == width && k.config.policy == policy &&
           fmha_backward_config_fits(k.config, device);
  };
  if (const char* forced = forced_config_name(kForcedBackwardConfigVariable); forced != nullptr) {
    for (const auto& k : fmha_backward_kernels()) {
      if (runs(k) && fmha_backward_config_name(k.config) == forced) return &k;
    }
  }
  for (const auto& k : fmha_backward_kernels()) {
    if (runs(k)) return &k;
  }
  return nullptr;
}

std::string fmha_backward_compiled_summary() {
  std::vector<std::pair<DType, int>> kernels;
  for (const auto& k : fmha_backward_kernels()) kernels.emplace_back(k.config.dtype, k.config.head_dim);
  return compiled_widths_summary(kernels);
}

}  // namespace attnkit::cuda::fmha
