// How the tuner times a config: it asks a Runner for one timed execution at a time. The Runner owns
// the inputs and the clock (CUDA events on a GPU, a steady clock on the CPU) and rotates over
// several input buffer sets by `iteration` so that timings see a cold L2 (DESIGN §6.4); tests inject
// timings through it. A config that cannot run throws; the tuner excludes it and logs why.
#pragma once
#include "tune/config_space.hpp"

namespace attnkit::tune {

class Runner {
 public:
  virtual ~Runner() = default;
  // Runs `config` once and returns its time in seconds. `iteration` counts this config's runs from
  // 0, warm-up included.
  virtual double measure_seconds(const Config& config, int iteration) = 0;
};

}  // namespace attnkit::tune
