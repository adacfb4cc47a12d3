// The list of forward-kernel instantiations in this build, one per (dtype, head dim, tile, mask policy),
// each compiled in its own .cu file (fmha_forward_<dtype>_d<head dim>_<policy>[_m<M>n<N>w<W>].cu) so
// they build in parallel. The first entry of each (dtype, head dim, policy) is its default tile; the
// others are alternatives the tuner chooses among (64x64 box tiles: +18 % on na2d 64x64 K13, -18 % on dense,
// measured on H100; docs/perf.md). ATTNKIT_KERNEL_SET_DEV (CMake
// -DATTNKIT_KERNEL_SET=dev) keeps head dims 64 and 128 with their default tiles only.
// Default tiles: head dim <= 128 -> BlockM 128, BlockN 64, 4 warps; 256 -> BlockM 64, BlockN 64, 4 warps.
#pragma once
#include "cuda/fmha/fmha_configs.hpp"

#if defined(ATTNKIT_KERNEL_SET_DEV)
#define ATTNKIT_FMHA_FULL_SET 0
#else
#define ATTNKIT_FMHA_FULL_SET 1
#endif

// X(dtype, head dim, BlockM, BlockN, warps, policy)
// clang-format off
#define ATTNKIT_FMHA_KERNELS_DEV(X) \
  X(f16, 64, 128, 64, 4, box) X(f16, 64, 128, 64, 4, list) X(f16, 128, 128, 64, 4, box) X(f16, 128, 128, 64, 4, list) \
  X(bf16, 64, 128, 64, 4, box) X(bf16, 64, 128, 64, 4, list) X(bf16, 128, 128, 64, 4, box) X(bf16, 128, 128, 64, 4, list)
#define ATTNKIT_FMHA_KERNELS_FULL_ONLY(X) \
  X(f16, 32, 128, 64, 4, box) X(f16, 32, 128, 64, 4, list) X(f16, 256, 64, 64, 4, box) X(f16, 256, 64, 64, 4, list) \
  X(bf16, 32, 128, 64, 4, box) X(bf16, 32, 128, 64, 4, list) X(bf16, 256, 64, 64, 4, box) X(bf16, 256, 64, 64, 4, list) \
  X(f16, 128, 64, 64, 4, box) X(bf16, 128, 64, 64, 4, box)
// clang-format on

// The Hopper tier (src/cuda/fmha_sm90), registered when the build compiles sm_90a:
// X(dtype, head dim, BlockN, policy); BlockM is 128 (two consumer warpgroups of 64 rows).
#if defined(ATTNKIT_HAVE_SM90A)
#define ATTNKIT_FMHA_SM90 1
// clang-format off
#define ATTNKIT_FMHA_SM90_KERNELS(X) \
  X(f16, 64, 128, box) X(f16, 64, 128, list) X(f16, 128, 128, box) X(f16, 128, 128, list) \
  X(bf16, 64, 128, box) X(bf16, 64, 128, list) X(bf16, 128, 128, box) X(bf16, 128, 128, list)
// clang-format on
#else
#define ATTNKIT_FMHA_SM90 0
#define ATTNKIT_FMHA_SM90_KERNELS(X)
#endif

#if ATTNKIT_FMHA_FULL_SET
#define ATTNKIT_FMHA_KERNELS(X) ATTNKIT_FMHA_KERNELS_DEV(X) ATTNKIT_FMHA_KERNELS_FULL_ONLY(X)
#else
#define ATTNKIT_FMHA_KERNELS(X) ATTNKIT_FMHA_KERNELS_DEV(X)
#endif

namespace attnkit::cuda::fmha {

#define ATTNKIT_FMHA_DECLARE_KERNEL(dtype, head_dim, m, n, w, policy) \
  FmhaKernel fmha_kernel_##dtype##_d##head_dim##_m##m##n##n##w##w##_##policy();
ATTNKIT_FMHA_KERNELS(ATTNKIT_FMHA_DECLARE_KERNEL)
#undef ATTNKIT_FMHA_DECLARE_KERNEL
#define ATTNKIT_FMHA_SM90_DECLARE_KERNEL(dtype, head_dim, n, policy) \
  FmhaKernel fmha_sm90_kernel_##dtype##_d##head_dim##_n##n##_##policy();
ATTNKIT_FMHA_SM90_KERNELS(ATTNKIT_FMHA_SM90_DECLARE_KERNEL)
#undef ATTNKIT_FMHA_SM90_DECLARE_KERNEL

}  // namespace attnkit::cuda::fmha
