// Forward kernel instantiation: f16, head dim 32, box policy, 128x64 tiles, 4 warps (none, causal and neighborhood
// masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_FULL_SET
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(f16, 32, 128, 64, 4, box)
#endif
