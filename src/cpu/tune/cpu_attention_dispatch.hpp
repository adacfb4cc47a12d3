// How a CPU attention plan gets its config: the problem's tuning key (with the density of a block or
// element mask counted from the host mask), then the process's CPU tuner (tune/process_tuners.hpp), with
// a runner that is built only if the tuner decides to time configs (on fresh buffers of the call's own
// sizes, never on the caller's tensors). may_tune == false (RunOptions::no_tuning) never times.
//
// The CPU backend must always run: if the tuner cannot answer (no valid config, a broken cache
// folder), the call logs a warning and runs with the drivers' defaults.
#pragma once
#include <string>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cpu/attention_config.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::tune {

struct CpuAttentionChoice {
  cpu::CpuAttentionConfig config;
  std::string name;  // the config id, e.g. "q32-all"
  ChoiceSource source = ChoiceSource::default_config;
};

CpuAttentionChoice choose_cpu_attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape,
                                                bool may_tune = true);
CpuAttentionChoice choose_cpu_attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                                 bool may_tune = true);

}  // namespace attnkit::tune
