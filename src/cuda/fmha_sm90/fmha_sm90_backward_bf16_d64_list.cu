// Hopper backward instantiation: bf16, head dim 64, list policy (block and element masks).
#include "cuda/fmha/fmha_backward_instances.hpp"

#include "cuda/fmha_sm90/fmha_sm90_backward_launch.cuh"
#if ATTNKIT_FMHA_SM90_BACKWARD
ATTNKIT_FMHA_SM90_BACKWARD_DEFINE(bf16, 64, 128, list)
#endif
