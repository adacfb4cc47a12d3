// The CPU backend's attention config spaces (forward and backward): a query-block size and a worker
// thread count, which the CPU drivers read as cpu::CpuAttentionConfig (src/cpu/attention_config.hpp):
// forward: query rows per task; backward: least query rows per dK/dV slice; threads: workers when
// the caller leaves RunOptions::num_threads at 0. The default config is the drivers' own choice
// before tuning existed (forward q32-all, backward q128-all), so untuned results do not change.
#pragma once

#include "cpu/attention_config.hpp"
#include "tune/config_space_registry.hpp"

namespace attnkit::tune {

// The driver knobs a config of the CPU space stands for.
cpu::CpuAttentionConfig cpu_attention_config(const Config& config);

ConfigSpace cpu_attention_space(TuneOp op);  // op: attention_forward or attention_backward
void register_cpu_attention_spaces(ConfigSpaceRegistry& registry);

}  // namespace attnkit::tune
