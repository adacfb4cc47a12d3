// Host launcher of the Hopper forward kernel and its registry entry, instantiated once per sm90 row of
// the kernel table (cmake/attnkit_kernels.cmake) by a generated .cu named for its config id calling
// make_fmha_sm90_kernel. Tile-list masks reuse the portable tier's preprocessing with the
// policy view of the tile (Sm90FmhaTraits::PolicyTraits), so lists and element bits match the
// consumers' thread map.
#pragma once
#include <cuda_runtime_api.h>

#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/fmha/fmha_launch.cuh"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"
#include "cuda/fmha_sm90/fmha_sm90_kernel.cuh"
#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"
#include "cuda/fmha_sm90/fmha_sm90_traits.cuh"

namespace attnkit::cuda::fmha_sm90 {

template <class Traits, template <class> class PolicyTemplate>
void launch_fmha_sm90_forward(const fmha::FmhaLaunch& request, fmha::FmhaWorkspace caller_workspace,
                              cudaStream_t stream) {
  using PolicyTraits = typename Traits::PolicyTraits;
  using Policy = PolicyTemplate<PolicyTraits>;
  fmha::FmhaLaunch launch = request;
  void* workspace = nullptr;
  if constexpr (std::is_same_v<Policy, fmha::TileListPolicy<PolicyTraits>>) {
    workspace = fmha::build_tile_lists<PolicyTraits>(launch, caller_workspace, stream);
  }
  Sm90TileMaps maps{};
  make_sm90_tile_maps(launch.params,
                      std::is_same_v<typename Traits::Element, cutlass::bfloat16_t> ? DType::bf16 : DType::f16,
                      Traits::kChunkColumns, Traits::kBlockM, Traits::kBlockN, maps);
  // Box masks are the same for every head: with Q and K/V by TMA a CTA may run several heads in turn.
  constexpr bool kHeadIndependent =
      Traits::kSeveralHeadsPerCta && std::is_same_v<Policy, fmha::BoxPolicy<PolicyTraits>>;
  launch.params.heads_per_cta =
      choose_heads_per_cta(launch.params, kHeadIndependent && maps.enabled && maps.q_enabled,
                           CtaSlots{launch.multiprocessors * Traits::kCtasPerSm, Traits::kCtasPerSm});
  auto* kernel = &fmha_sm90_forward_kernel<Traits, Policy>;
  cudaError_t status = raise_dynamic_shared_memory_once(kernel, Traits::kSmemBytes);
  if (status == cudaSuccess) {
    const fmha::FmhaParams& p = launch.params;
    const unsigned head_groups = static_cast<unsigned>((p.heads_q + p.heads_per_cta - 1) / p.heads_per_cta);
    kernel<<<dim3(p.total_q_tiles, head_groups, p.batch), Traits::kThreads, Traits::kSmemBytes, stream>>>(p, maps);
    status = cudaGetLastError();
  }
  if (workspace != nullptr) {
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    if (status == cudaSuccess) status = freed;
  }
  check_cuda(status, "fused attention forward kernel launch (sm90)");
}

template <class Element, int HeadDim, int BlockM, int BlockN, template <class> class PolicyTemplate>
fmha::FmhaKernel make_fmha_sm90_kernel(DType dtype, fmha::FmhaPolicyKind policy) {
  using Traits = Sm90FmhaTraits<Element, HeadDim, BlockM, BlockN>;
  fmha::FmhaConfig config;
  config.dtype = dtype;
  config.head_dim = HeadDim;
  config.block_m = Traits::kBlockM;
  config.block_n = Traits::kBlockN;
  config.warps = Traits::kWarps;
  config.stages = Traits::kStages;
  config.smem_bytes = Traits::kSmemBytes;
  // The launch bound's share of the register file (the warpgroups then trade registers via setmaxnreg).
  config.registers_estimate = 65536 / Traits::kThreads / Traits::kCtasPerSm / 8 * 8;
  config.policy = policy;
  config.architecture = 90;
  config.ctas_per_sm = Traits::kCtasPerSm;
  return fmha::FmhaKernel{config, &launch_fmha_sm90_forward<Traits, PolicyTemplate>,
                          &fmha::fmha_workspace_bytes<typename Traits::PolicyTraits, PolicyTemplate>};
}

}  // namespace attnkit::cuda::fmha_sm90
