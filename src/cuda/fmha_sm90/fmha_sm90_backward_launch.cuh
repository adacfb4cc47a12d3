// Registry entry of the Hopper backward, instantiated once per sm90 row of the kernel table
// (cmake/attnkit_kernels.cmake) by a generated .cu named for its config id calling
// make_fmha_sm90_backward_kernel.
// The portable launcher (fmha_backward_launch.cuh) runs the whole sequence — workspace, tile lists,
// preprocess, the dQ kernel (deterministic mode) or the dQ convert (fast mode) — on the same 64 x 128 or 64 x 64
// tiles (Sm90BackwardTraits::Portable), with this tier's dK/dV kernel in place of the portable one.
#pragma once
#include "cuda/fmha/fmha_backward_launch.cuh"
#include "cuda/fmha_sm90/fmha_sm90_backward_dkdv.cuh"
#include "cuda/fmha_sm90/fmha_sm90_backward_traits.cuh"

namespace attnkit::cuda::fmha_sm90 {

template <class Traits, bool kLists>
struct Sm90DkDv {
  static auto kernel() {
    if constexpr (kLists) {
      return &fmha_sm90_backward_dkdv_kernel<Traits, fmha::KvListSchedule, true>;
    } else {
      return &fmha_sm90_backward_dkdv_kernel<Traits, fmha::KvBoxSchedule, false>;
    }
  }
  // Builds the dQ accumulator's tensor map (fast mode) and launches.
  static cudaError_t launch(const fmha::FmhaBackwardParams& p, dim3 grid, cudaStream_t stream) {
    if (p.rpb.data != nullptr) {  // selection gives rpb calls to the portable tier (FmhaDevice::portable_only)
      throw Error(Status::unsupported,
                  "mask.rpb: the Hopper backward tier adds no positional bias; allowed: a "
                  "portable backward config (ATTNKIT_FMHA_BACKWARD_CONFIG without _sm90)");
    }
    auto* dkdv = kernel();
    if (const cudaError_t status = fmha::allow_shared_memory(dkdv, Traits::kSmemBytes); status != cudaSuccess) {
      return status;
    }
    Sm90DqMap dq_map{};
    make_sm90_dq_map(p, Traits::kBlockM, dq_map);
    dkdv<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p, dq_map);
    return cudaGetLastError();
  }
};

template <class Element, int HeadDim, int BlockN, bool kLists>
fmha::FmhaBackwardKernel make_fmha_sm90_backward_kernel(DType dtype) {
  using Traits = Sm90BackwardTraits<Element, HeadDim, BlockN>;
  using Portable = typename Traits::Portable;
  fmha::FmhaBackwardConfig config;
  config.dtype = dtype;
  config.head_dim = HeadDim;
  config.block_m = Traits::kBlockM;
  config.block_n = Traits::kBlockN;
  config.warps = Traits::kWarps;
  config.smem_bytes_dkdv = Traits::kSmemBytes;
  config.smem_bytes_dq = Portable::kSmemBytesDq;
  config.policy = kLists ? fmha::FmhaBackwardPolicy::tile_list : fmha::FmhaBackwardPolicy::box;
  config.architecture = 90;
  config.ctas_per_sm = Traits::kCtasPerSm;
  config.several_heads_per_cta = Traits::kSeveralHeadsPerCta;
  return fmha::FmhaBackwardKernel{config, &fmha::launch_fmha_backward<Portable, kLists, Sm90DkDv<Traits, kLists>>,
                                  &fmha::backward_workspace_bytes<Portable, kLists>};
}

}  // namespace attnkit::cuda::fmha_sm90
