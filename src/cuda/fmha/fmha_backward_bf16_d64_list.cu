// Backward kernel instantiation: bf16, head dim 64, tile-list policy (block and element masks).
#include "cuda/fmha/fmha_backward_instances.hpp"
#include "cuda/fmha/fmha_backward_launch.cuh"
ATTNKIT_FMHA_BACKWARD_DEFINE(bf16, 64, list)
