// Timing one config and choosing among timed configs (DESIGN §6.4).
//
// measure_config: `warmup_steps` untimed runs, then timed runs until the relative spread
// (p75 - p25) / median of the samples drops below `spread_threshold` (checked from `min_steps` on)
// or `max_steps` runs were taken; the result is the median. A run that throws or returns a time
// that is not finite and positive marks the config failed.
//
// choose_winner: the fastest successful config by median (ties by id), except that a config other
// than the default wins only when it beats the default's median by more than `margin` (a fraction):
// a gain within noise is not worth a non-default kernel.
#pragma once
#include <string>
#include <vector>

#include "tune/runner.hpp"

namespace attnkit::tune {

struct MeasurementPolicy {
  int warmup_steps = 5;
  int min_steps = 5;
  int max_steps = 20;
  double spread_threshold = 0.05;
};

struct ConfigTiming {
  std::string config_id;
  bool ok = false;
  std::string error;  // why it failed
  double median_seconds = 0.0;
  double p25_seconds = 0.0;
  double p75_seconds = 0.0;
  int samples = 0;
};

ConfigTiming measure_config(Runner& runner, const Config& config, const MeasurementPolicy& policy);

// "" when no timing succeeded.
std::string choose_winner(const std::vector<ConfigTiming>& timings, const std::string& default_id, double margin);

}  // namespace attnkit::tune
