// Public control of the auto-tuner (DESIGN §6): settings, multi-rank agreement and what the tuner
// picks for a call. The C ABI mirrors this (attnkit_tuner_* in attnkit.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/backend.hpp"
#include "attnkit/export.hpp"

namespace attnkit {

// Values match the C ABI's attnkit_tune_mode.
enum class TuneMode : int32_t { off = 0, on = 1, load_only = 2 };

// Names follow NATTEN's use_autotuner() where it has one.
struct TunerSettings {
  TuneMode mode = TuneMode::load_only;
  bool deterministic = false;
  bool forward_pass = true;
  bool backward_pass = true;
  bool thorough_mode_forward = false;
  bool thorough_mode_backward = false;
  int32_t warmup_steps_forward = 5;
  int32_t warmup_steps_backward = 5;
  int32_t steps_forward = 20;
  int32_t steps_backward = 20;
  int32_t top_k = 4;
  std::string cache_dir;  // "" = memory only
};

// The settings in force: the environment's (ATTNKIT_TUNE, ATTNKIT_DETERMINISTIC, ATTNKIT_CACHE_DIR)
// until configure_tuner() is called.
ATTNKIT_API TunerSettings tuner_settings();
ATTNKIT_API void configure_tuner(const TunerSettings& settings);

// Values match the C ABI's attnkit_agreement.
enum class Agreement : int32_t { root_tunes = 0, split_configs = 1 };

// Collectives of a multi-process job, provided by the caller (torch.distributed in Python). Every
// rank must make the same attnkit calls in the same order.
struct RankCollectives {
  int32_t rank = 0;
  int32_t size = 1;
  Agreement agreement = Agreement::root_tunes;
  std::function<void(std::string& bytes, int root)> broadcast;                   // in/out
  std::function<std::vector<std::string>(const std::string& bytes)> all_gather;  // by rank
};
// size <= 1 or empty callbacks: this process alone.
ATTNKIT_API void set_tuner_rank_group(const RankCollectives& group);

struct TunedConfig {
  std::string name;    // e.g. "bf16_d128_m128_n64_w4_s2_box"
  std::string source;  // "default", "cache" or "tuned"
};
// The config a call with these arguments runs with (tuning first when the settings allow it).
ATTNKIT_API TunedConfig attention_forward_config(const AttentionForward& problem, const RunOptions& options = {});
ATTNKIT_API TunedConfig attention_backward_config(const AttentionBackward& problem, const RunOptions& options = {});

}  // namespace attnkit
