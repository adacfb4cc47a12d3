// Forward kernel instantiation: f16, head dim 128, box policy, 128x64 tiles, 4 warps (none, causal and neighborhood
// masks).
#include "cuda/fmha/fmha_instances.hpp"

#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(f16, 128, 128, 64, 4, box)
