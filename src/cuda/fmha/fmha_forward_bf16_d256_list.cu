// Forward kernel instantiation: bf16, head dim 256, list policy (block and element masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_HEAD_DIM_COMPILED(256)
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(bf16, 256, list)
#endif
