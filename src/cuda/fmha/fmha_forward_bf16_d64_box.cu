// Forward kernel instantiation: bf16, head dim 64, box policy (none, causal and neighborhood masks).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_HEAD_DIM_COMPILED(64)
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(bf16, 64, box)
#endif
