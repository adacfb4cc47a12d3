// Runs the CPU attention drivers of the chosen instruction set with a given config (the plans of
// cpu/attention_plan.cpp pass the one the tuner chose, cpu/tune/cpu_attention_dispatch.hpp).
#include "cpu/attention_isa.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "attnkit/error.hpp"
#include "cpu/cpu_backend.hpp"

namespace attnkit::cpu {
namespace {

constexpr int32_t kAutomatic = -1;
thread_local CpuAttentionConfig last_config;
std::atomic<int32_t> forced_isa{kAutomatic};

CpuIsa widest_supported_isa() {
  if (cpu_isa_supported(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_isa_supported(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::baseline;
}

CpuIsa parse_isa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    if (name == cpu_isa_name(isa)) return isa;
  }
  throw Error(Status::invalid_argument, "ATTNKIT_CPU_ISA: '" + std::string(name) +
                                            "' is not an instruction set; allowed: baseline, avx2, avx512");
}

CpuIsa checked(CpuIsa isa, const char* source) {
  if (!cpu_isa_supported(isa)) {
    throw Error(Status::unsupported, std::string(source) + ": instruction set '" + cpu_isa_name(isa) +
                                         "' is not supported by this CPU or build; allowed: baseline" +
                                         (cpu_isa_supported(CpuIsa::avx2) ? ", avx2" : "") +
                                         (cpu_isa_supported(CpuIsa::avx512) ? ", avx512" : ""));
  }
  return isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return "baseline";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "unknown";
}

bool cpu_isa_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline: return true;
#if ATTNKIT_CPU_X86_KERNELS
    case CpuIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    case CpuIsa::avx2:
    case CpuIsa::avx512: return false;
#endif
  }
  return false;
}

CpuIsa attention_cpu_isa() {
  const int32_t forced = forced_isa.load(std::memory_order_relaxed);
  if (forced != kAutomatic) return checked(static_cast<CpuIsa>(forced), "force_attention_cpu_isa");
  if (const char* requested = std::getenv("ATTNKIT_CPU_ISA"); requested != nullptr && *requested != '\0') {
    return checked(parse_isa(requested), "ATTNKIT_CPU_ISA");
  }
  static const CpuIsa widest = widest_supported_isa();
  return widest;
}

void force_attention_cpu_isa(std::optional<CpuIsa> isa) {
  forced_isa.store(isa ? static_cast<int32_t>(*isa) : kAutomatic, std::memory_order_relaxed);
}

CpuAttentionConfig last_attention_config_on_this_thread() { return last_config; }

void attention_forward_configured(const AttentionForward& problem, const detail::AttentionShape& shape,
                                  const RunOptions& options, const CpuAttentionConfig& config) {
  last_config = config;
  switch (attention_cpu_isa()) {
#if ATTNKIT_CPU_X86_KERNELS
    case CpuIsa::avx512: isa_avx512::attention_forward(problem, shape, options, config); return;
    case CpuIsa::avx2: isa_avx2::attention_forward(problem, shape, options, config); return;
#endif
    default: isa_baseline::attention_forward(problem, shape, options, config); return;
  }
}

void attention_backward_configured(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                   const RunOptions& options, const CpuAttentionConfig& config) {
  last_config = config;
  switch (attention_cpu_isa()) {
#if ATTNKIT_CPU_X86_KERNELS
    case CpuIsa::avx512: isa_avx512::attention_backward(problem, shape, options, config); return;
    case CpuIsa::avx2: isa_avx2::attention_backward(problem, shape, options, config); return;
#endif
    default: isa_baseline::attention_backward(problem, shape, options, config); return;
  }
}

}  // namespace attnkit::cpu
