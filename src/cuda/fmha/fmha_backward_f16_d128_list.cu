// Backward kernel instantiation: f16, head dim 128, tile-list policy (block and element masks).
#include "cuda/fmha/fmha_backward_instances.hpp"
#include "cuda/fmha/fmha_backward_launch.cuh"
ATTNKIT_FMHA_BACKWARD_DEFINE(f16, 128, list)
