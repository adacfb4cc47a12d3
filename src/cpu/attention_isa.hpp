// Instruction sets the CPU attention kernels are compiled for, and the choice among them at run
// time.
//
// The kernels (attention_kernels.hpp) are compiled once per instruction set, each copy in its own
// namespace, by attention_kernels_<isa>.cpp: baseline (whatever the build targets, SSE2 on
// x86-64), avx2 (AVX2 + FMA) and avx512 (AVX-512 F/VL/BW/DQ, 512-bit vectors) on x86-64 with GCC
// or Clang. Each of those files switches the compiler target with a pragma only after including
// every other header, so only the namespaced kernel code uses the wider instructions.
// cpu::attention_forward/backward run the widest set the CPU supports (cpuid), unless
// ATTNKIT_CPU_ISA=baseline|avx2|avx512 in the environment or force_attention_cpu_isa() says
// otherwise. Results differ between sets only by float rounding (summation order).
#pragma once
#include <cstdint>
#include <optional>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cpu/attention_config.hpp"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define ATTNKIT_CPU_X86_KERNELS 1
#else
#define ATTNKIT_CPU_X86_KERNELS 0
#endif

namespace attnkit::cpu {

enum class CpuIsa : int32_t { baseline = 0, avx2 = 1, avx512 = 2 };

const char* cpu_isa_name(CpuIsa isa);
// Compiled into this library and supported by the running CPU.
bool cpu_isa_supported(CpuIsa isa);
// The set calls use now: the override if any, else ATTNKIT_CPU_ISA, else the widest supported.
// Throws attnkit::Error when the requested set is unknown or unsupported.
CpuIsa attention_cpu_isa();
// For tests and benchmarks: run every call with `isa` (std::nullopt: back to automatic).
void force_attention_cpu_isa(std::optional<CpuIsa> isa);

namespace isa_baseline {
void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                       const CpuAttentionConfig& config);
void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options, const CpuAttentionConfig& config);
}  // namespace isa_baseline
#if ATTNKIT_CPU_X86_KERNELS
namespace isa_avx2 {
void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                       const CpuAttentionConfig& config);
void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options, const CpuAttentionConfig& config);
}  // namespace isa_avx2
namespace isa_avx512 {
void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                       const CpuAttentionConfig& config);
void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options, const CpuAttentionConfig& config);
}  // namespace isa_avx512
#endif

}  // namespace attnkit::cpu
