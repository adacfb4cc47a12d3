// The tuner's config spaces of the portable fused-attention kernels (DESIGN §5, §6.3), built from
// their registries: one tune::Config per compiled forward kernel (fmha_forward_kernels()), with its
// resource needs (dynamic shared memory, registers from ptxas, threads), a validity predicate (same
// dtype, the compiled head-dim width the problem needs, the mask's policy) and a cost estimate that
// counts the tiles the kernel really visits:
//  - neighborhood masks (box policy): the box shapes the launch will choose (choose_box_shapes) and
//    the (Q tile, KV tile) visits they produce (count_box_visits), the same tile-range math the
//    kernel uses;
//  - dense, causal and sparse masks: attention_tile_work's flat tiles (causal up to the diagonal,
//    sparse by density);
// then the roofline over waves of SMs x occupancy. The default config is the registry's default for
// (dtype, width, policy): the first entry that fits, as before the tuner existed.
//
// The backward space is built the same way from fmha_backward_kernels() (ids from
// fmha_backward_config_name, shared memory the larger of the dK/dV and dQ kernels', flat tile work of
// the backward op); its default is the backward registry's.
#pragma once
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "tune/config_space_registry.hpp"
#include "tune/roofline.hpp"

namespace attnkit::cuda::fmha {

// Params of a forward config, by name: dtype (the DType value), head_dim, block_m, block_n, warps,
// stages, policy (FmhaPolicyKind value).
tune::ConfigSpace fmha_forward_space();
// Params: dtype, head_dim, block_m, block_n, warps, policy (FmhaBackwardPolicy value).
tune::ConfigSpace fmha_backward_space();
void register_fmha_spaces(tune::ConfigSpaceRegistry& registry);

// The registry entry a config of fmha_forward_space() / fmha_backward_space() holds (tune::Config::entry).
inline const FmhaKernel* forward_kernel_of(const tune::Config& config) {
  return static_cast<const FmhaKernel*>(config.entry);
}
inline const FmhaBackwardKernel* backward_kernel_of(const tune::Config& config) {
  return static_cast<const FmhaBackwardKernel*>(config.entry);
}

// The registry entry of a config name (tests, tools); nullptr for an unknown id.
const FmhaKernel* fmha_forward_kernel_by_name(const std::string& id);
const FmhaBackwardKernel* fmha_backward_kernel_by_name(const std::string& id);

// The tile work of `config` on `spec`, counted as described above (for the estimate and tests).
tune::TileWork fmha_forward_tile_work(const FmhaConfig& config, const tune::ProblemSpec& spec);
// Relative tensor-core efficiency of a tile config (1 for 32 query rows per warp), measured on H100.
double fmha_forward_tile_efficiency(const FmhaConfig& config);
// The forward's default (untuned) kernel: the registry default, except for neighborhood masks, where
// the compatible tile with the least efficiency-weighted visited work. nullptr when none runs on `device`.
const FmhaKernel* fmha_forward_default_for(const tune::ProblemSpec& spec, const FmhaDevice& device);
// The backward's default (untuned) kernel: the registry default, except for neighborhood masks on the Hopper tier,
// where the dK/dV kernel of 64-key tiles of the same dtype, width and policy when one is compiled and fits. nullptr
// when none runs on `device`.
const FmhaBackwardKernel* fmha_backward_default_for(const tune::ProblemSpec& spec, const FmhaDevice& device);

}  // namespace attnkit::cuda::fmha
