// The CPU attention kernels for AVX2 + FMA (see attention_isa.hpp): 256-bit vectors, so a
// 64-byte line is two registers; tiles of 4 rows keep 8 accumulator registers busy.
#include "cpu/attention_isa.hpp"
#include "cpu/attention_kernel_includes.hpp"

#if ATTNKIT_CPU_X86_KERNELS
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#define ATTNKIT_CPU_ISA_NAMESPACE isa_avx2
#define ATTNKIT_CPU_TILE_ROWS 4
#define ATTNKIT_CPU_SPLIT 1
#include "cpu/attention_kernels.hpp"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
