// Forward kernel instantiation: f16, head dim 256, list policy, 64x64 tiles, 4 warps (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_FULL_SET
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(f16, 256, 64, 64, 4, list)
#endif
