// The backward-kernel instantiations of this build, one per (dtype, compiled head dim, mask policy), each
// in its own .cu file (fmha_backward_<dtype>_d<head dim>_<policy>.cu) holding the preprocess, dK/dV and
// dQ kernels it needs, so they compile in parallel. Widths 64 and 128 only (D = 32 runs on 64; wider
// heads are refused with the list of widths): the dev and full kernel sets are the same 8 files.
// Tiles: BlockM 64 queries x BlockN 64 keys, 4 warps, for both widths.
#pragma once
#include "cuda/fmha/fmha_backward_configs.hpp"

// clang-format off
#define ATTNKIT_FMHA_BACKWARD_KERNELS(X) \
  X(f16, 64, box) X(f16, 64, list) X(f16, 128, box) X(f16, 128, list) \
  X(bf16, 64, box) X(bf16, 64, list) X(bf16, 128, box) X(bf16, 128, list)
// clang-format on

// The Hopper tier's dK/dV kernel (src/cuda/fmha_sm90: BlockM 64, 64 keys per warpgroup), registered when
// the build compiles sm_90a: X(dtype, head dim, BlockN, policy); BlockN 128 = two warpgroups, one CTA per SM.
#if defined(ATTNKIT_HAVE_SM90A)
#define ATTNKIT_FMHA_SM90_BACKWARD 1
// clang-format off
#define ATTNKIT_FMHA_SM90_BACKWARD_KERNELS(X) \
  X(f16, 64, 128, box) X(f16, 64, 128, list) X(f16, 128, 128, box) X(f16, 128, 128, list) \
  X(bf16, 64, 128, box) X(bf16, 64, 128, list) X(bf16, 128, 128, box) X(bf16, 128, 128, list)
// clang-format on
#else
#define ATTNKIT_FMHA_SM90_BACKWARD 0
#define ATTNKIT_FMHA_SM90_BACKWARD_KERNELS(X)
#endif

namespace attnkit::cuda::fmha {

#define ATTNKIT_FMHA_BACKWARD_DECLARE(dtype, head_dim, policy) \
  FmhaBackwardKernel fmha_backward_kernel_##dtype##_d##head_dim##_##policy();
ATTNKIT_FMHA_BACKWARD_KERNELS(ATTNKIT_FMHA_BACKWARD_DECLARE)
#undef ATTNKIT_FMHA_BACKWARD_DECLARE
#define ATTNKIT_FMHA_SM90_BACKWARD_DECLARE(dtype, head_dim, n, policy) \
  FmhaBackwardKernel fmha_sm90_backward_kernel_##dtype##_d##head_dim##_n##n##_##policy();
ATTNKIT_FMHA_SM90_BACKWARD_KERNELS(ATTNKIT_FMHA_SM90_BACKWARD_DECLARE)
#undef ATTNKIT_FMHA_SM90_BACKWARD_DECLARE

}  // namespace attnkit::cuda::fmha
