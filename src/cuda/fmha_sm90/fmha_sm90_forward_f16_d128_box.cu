// Hopper forward kernel instantiation: f16, head dim 128, box policy (none, causal, neighborhood masks).
#include "cuda/fmha/fmha_instances.hpp"

#include "cuda/fmha_sm90/fmha_sm90_launch.cuh"
#if ATTNKIT_FMHA_SM90
ATTNKIT_FMHA_SM90_DEFINE_KERNEL(f16, 128, 128, box)
#endif
