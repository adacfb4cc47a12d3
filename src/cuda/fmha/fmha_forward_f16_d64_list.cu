// Forward kernel instantiation: f16, head dim 64, list policy (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_HEAD_DIM_COMPILED(64)
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(f16, 64, list)
#endif
