// Forward kernel instantiation: bf16, head dim 32, list policy, 128x64 tiles, 4 warps (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_FULL_SET
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(bf16, 32, 128, 64, 4, list)
#endif
