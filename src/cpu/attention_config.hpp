// The knobs of the CPU attention drivers that the auto-tuner chooses (the CPU config space,
// src/cpu/tune/cpu_attention_space.cpp). A zero field means "the driver's own default", which is what
// every call used before the tuner existed, so untuned results are unchanged.
//
// query_block: forward: query rows per task (rounded up to whole tiles, so the tiles and therefore
//              the results are the same for every value); backward: least query rows per slice
//              (fewer, larger slices sum dK/dV in fewer parts: results may differ in rounding).
// threads:     worker threads when RunOptions::num_threads is 0 (a caller's explicit count wins).
#pragma once
#include <cstdint>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cpu {

struct CpuAttentionConfig {
  int64_t query_block = 0;
  int32_t threads = 0;
};

// The drivers' defaults, which the config space's default config names.
inline constexpr int64_t kDefaultForwardQueryBlock = 32;
inline constexpr int64_t kDefaultBackwardQueryBlock = 128;

// RunOptions with the config's thread count applied where the caller left it open.
inline RunOptions with_config_threads(const RunOptions& options, const CpuAttentionConfig& config) {
  RunOptions applied = options;
  if (applied.num_threads <= 0 && config.threads > 0) applied.num_threads = config.threads;
  return applied;
}

// The config of the last attention_*_configured call on this thread (tests check that what the tuner
// chose is what ran).
CpuAttentionConfig last_attention_config_on_this_thread();

// The CPU backend with an explicit config, bypassing the tuner (the tuner's runner calls these).
void attention_forward_configured(const AttentionForward& problem, const detail::AttentionShape& shape,
                                  const RunOptions& options, const CpuAttentionConfig& config);
void attention_backward_configured(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                   const RunOptions& options, const CpuAttentionConfig& config);

}  // namespace attnkit::cpu
