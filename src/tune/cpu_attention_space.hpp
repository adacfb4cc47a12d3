// The CPU backend's attention config spaces (forward and backward): a query-block size (queries a
// worker processes per task, so that their K/V stream stays in its L2) and a worker thread count.
// The thread count is applied through RunOptions::num_threads; the CPU backend does not read the
// query-block size yet, so its timings differ only by noise until it does.
#pragma once

#include "tune/config_space_registry.hpp"

namespace attnkit::tune {

ConfigSpace cpu_attention_space(TuneOp op);  // op: attention_forward or attention_backward
void register_cpu_attention_spaces(ConfigSpaceRegistry& registry);

}  // namespace attnkit::tune
