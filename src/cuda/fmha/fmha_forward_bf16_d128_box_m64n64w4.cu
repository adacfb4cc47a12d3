// Forward kernel instantiation: bf16, head dim 128, box policy (none, causal and neighborhood masks), 64x64 tiles, 4
// warps (full kernel set).
#include "cuda/fmha/fmha_instances.hpp"

#if ATTNKIT_FMHA_FULL_SET
#include "cuda/fmha/fmha_launch.cuh"
ATTNKIT_FMHA_DEFINE_KERNEL(bf16, 128, 64, 64, 4, box)
#endif
