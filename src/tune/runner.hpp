// How the tuner times a config: it asks a Runner for one timed execution at a time. The Runner owns
// the inputs and the clock (CUDA events on a GPU, a steady clock on the CPU) and rotates over
// several input buffer sets by `iteration` so that timings see a cold L2 (DESIGN §6.4); tests inject
// timings through it. A config that cannot run throws; the tuner excludes it and logs why.
//
// The tuner interleaves the candidates (measurement.hpp): runs of different configs follow each
// other, and `iteration` numbers every run of one measurement in the order they happen, whichever
// config they belong to. So consecutive runs, of the same config or not, get consecutive iterations,
// and a rotation by `iteration` hands every run a buffer set the run before it did not touch: the
// default and the candidates all see the same L2 treatment.
#pragma once
#include "tune/config_space.hpp"

namespace attnkit::tune {

class Runner {
 public:
  virtual ~Runner() = default;
  // Runs `config` once and returns its time in seconds. `iteration` counts the runs of the current
  // measurement from 0 (every candidate's, warm-up included), in the order they are made.
  virtual double measure_seconds(const Config& config, int iteration) = 0;
};

}  // namespace attnkit::tune
