// The CPU attention kernels for the build's baseline instruction set (see attention_isa.hpp). On
// x86-64 that is SSE2 (16 registers of 4 floats): tiles of 2 rows keep 8 accumulators busy.
#include "cpu/attention_isa.hpp"
#include "cpu/attention_kernel_includes.hpp"

#define ATTNKIT_CPU_ISA_NAMESPACE isa_baseline
#define ATTNKIT_CPU_TILE_ROWS 2
#define ATTNKIT_CPU_SPLIT 1
#include "cpu/attention_kernels.hpp"
