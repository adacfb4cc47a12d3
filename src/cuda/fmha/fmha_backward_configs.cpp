#include "cuda/fmha/fmha_backward_configs.hpp"

#include <algorithm>
#include <map>

#include "cuda/fmha/fmha_backward_instances.hpp"
#include "cuda/fmha/fmha_configs.hpp"

namespace attnkit::cuda::fmha {

const std::vector<FmhaBackwardKernel>& fmha_backward_kernels() {
  static const std::vector<FmhaBackwardKernel> kernels = [] {
    std::vector<FmhaBackwardKernel> list;
#define ATTNKIT_FMHA_BACKWARD_REGISTER(dtype, head_dim, policy) \
  list.push_back(fmha_backward_kernel_##dtype##_d##head_dim##_##policy());
    ATTNKIT_FMHA_BACKWARD_KERNELS(ATTNKIT_FMHA_BACKWARD_REGISTER)
#undef ATTNKIT_FMHA_BACKWARD_REGISTER
    return list;
  }();
  return kernels;
}

std::string fmha_backward_config_name(const FmhaBackwardConfig& c) {
  return "bwd_" + std::string(c.dtype == DType::bf16 ? "bf16" : "f16") + "_d" + std::to_string(c.head_dim) + "_m" +
         std::to_string(c.block_m) + "_n" + std::to_string(c.block_n) + "_w" + std::to_string(c.warps) + "_" +
         (c.policy == FmhaBackwardPolicy::box ? "box" : "list");
}

int fmha_backward_compiled_width(DType dtype, int64_t head_dim, int64_t head_dim_v) {
  const int64_t needed = std::max(head_dim, head_dim_v);
  int best = 0;
  for (const auto& k : fmha_backward_kernels()) {
    if (k.config.dtype != dtype || k.config.head_dim < needed) continue;
    if (best == 0 || k.config.head_dim < best) best = k.config.head_dim;
  }
  return best;
}

const FmhaBackwardKernel* fmha_backward_default_kernel(DType dtype, int64_t head_dim, int64_t head_dim_v,
                                                       FmhaBackwardPolicy policy, int max_shared_bytes_optin) {
  const int width = fmha_backward_compiled_width(dtype, head_dim, head_dim_v);
  for (const auto& k : fmha_backward_kernels()) {
    if (k.config.dtype == dtype && k.config.head_dim == width && k.config.policy == policy &&
        std::max(k.config.smem_bytes_dkdv, k.config.smem_bytes_dq) <= max_shared_bytes_optin) {
      return &k;
    }
  }
  return nullptr;
}

std::string fmha_backward_compiled_summary() {
  std::vector<std::pair<DType, int>> kernels;
  for (const auto& k : fmha_backward_kernels()) kernels.emplace_back(k.config.dtype, k.config.head_dim);
  return compiled_widths_summary(kernels);
}

}  // namespace attnkit::cuda::fmha
