// The list of forward-kernel instantiations in this build, one per (dtype, head dim, mask policy),
// each compiled in its own .cu file (fmha_forward_<dtype>_d<head dim>_<policy>.cu) so they build in
// parallel. ATTNKIT_KERNEL_SET_DEV (CMake -DATTNKIT_KERNEL_SET=dev) keeps head dims 64 and 128 only.
// Tiles: head dim <= 128 -> BlockM 128, BlockN 64, 4 warps; 256 -> BlockM 64, BlockN 64, 4 warps.
#pragma once
#include "cuda/fmha/fmha_configs.hpp"

// clang-format off
#if defined(ATTNKIT_KERNEL_SET_DEV)
#define ATTNKIT_FMHA_HEAD_DIM_COMPILED(head_dim) ((head_dim) == 64 || (head_dim) == 128)
#define ATTNKIT_FMHA_KERNELS(X) \
  X(f16, 64, box) X(f16, 64, list) X(f16, 128, box) X(f16, 128, list) \
  X(bf16, 64, box) X(bf16, 64, list) X(bf16, 128, box) X(bf16, 128, list)
#else
#define ATTNKIT_FMHA_HEAD_DIM_COMPILED(head_dim) 1
#define ATTNKIT_FMHA_KERNELS(X) \
  X(f16, 32, box) X(f16, 32, list) X(f16, 64, box) X(f16, 64, list) \
  X(f16, 128, box) X(f16, 128, list) X(f16, 256, box) X(f16, 256, list) \
  X(bf16, 32, box) X(bf16, 32, list) X(bf16, 64, box) X(bf16, 64, list) \
  X(bf16, 128, box) X(bf16, 128, list) X(bf16, 256, box) X(bf16, 256, list)
#endif
// clang-format on

namespace attnkit::cuda::fmha {

#define ATTNKIT_FMHA_DECLARE_KERNEL(dtype, head_dim, policy) FmhaKernel fmha_kernel_##dtype##_d##head_dim##_##policy();
ATTNKIT_FMHA_KERNELS(ATTNKIT_FMHA_DECLARE_KERNEL)
#undef ATTNKIT_FMHA_DECLARE_KERNEL

}  // namespace attnkit::cuda::fmha
