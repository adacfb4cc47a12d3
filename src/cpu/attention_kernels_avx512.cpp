// The CPU attention kernels for AVX-512 (see attention_isa.hpp): a 64-byte line is one 512-bit
// register; tiles of 4 rows with 2 interleaved accumulator sets keep 8 registers busy.
#include "cpu/attention_isa.hpp"
#include "cpu/attention_kernel_includes.hpp"

#if ATTNKIT_CPU_X86_KERNELS
#if defined(__clang__)
// Clang has no prefer-vector-width in target attributes; it vectorises these loops at 256 bits.
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512")
#endif

#define ATTNKIT_CPU_ISA_NAMESPACE isa_avx512
#define ATTNKIT_CPU_TILE_ROWS 4
#define ATTNKIT_CPU_SPLIT 2
#include "cpu/attention_kernels.hpp"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
