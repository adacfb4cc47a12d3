// Hopper forward kernel instantiation: bf16, head dim 128, list policy (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#include "cuda/fmha_sm90/fmha_sm90_launch.cuh"
#if ATTNKIT_FMHA_SM90
ATTNKIT_FMHA_SM90_DEFINE_KERNEL(bf16, 128, 128, list)
#endif
