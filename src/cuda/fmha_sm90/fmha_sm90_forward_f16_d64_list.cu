// Hopper forward kernel instantiation: f16, head dim 64, list policy (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#include "cuda/fmha_sm90/fmha_sm90_launch.cuh"
#if ATTNKIT_FMHA_SM90
ATTNKIT_FMHA_SM90_DEFINE_KERNEL(f16, 64, 128, list)
#endif
