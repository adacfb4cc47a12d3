// Backward kernel instantiation: f16, head dim 128, box policy (none, causal and neighborhood masks).
#include "cuda/fmha/fmha_backward_instances.hpp"
#include "cuda/fmha/fmha_backward_launch.cuh"
ATTNKIT_FMHA_BACKWARD_DEFINE(f16, 128, box)
