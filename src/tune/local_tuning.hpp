// Tuning one problem in this process: rank the space's configs by predicted cost, time the chosen
// candidates (top K plus the default, or all in thorough mode) together, interleaved, and pick the
// winner with the rule of measurement.hpp (a non-default must beat the default by more than the
// margin and the measured noise). A plan with a single candidate (one valid config, or top_k 1
// landing on the default) is the default, decided without timing. Every step is logged: info for the
// outcome (the winner's gain over the default, or why the default stays), debug for each config's
// timing, warning for a config that failed (it is excluded).
#pragma once
#include <string>
#include <vector>

#include "tune/config_space.hpp"
#include "tune/measurement.hpp"
#include "tune/problem_key.hpp"
#include "tune/runner.hpp"
#include "tune/tuner_settings.hpp"

namespace attnkit::tune {

enum class ChoiceSource {
  cached,          // a winner already known (memory or disk cache, or agreed by the ranks earlier)
  tuned,           // benchmarked for this call
  default_config,  // no winner known and tuning not allowed now
};

std::string_view source_name(ChoiceSource source);  // "cached", "tuned", "default"

struct TuneOutcome {
  std::string winner;  // config id; "" only when the space has no valid config
  std::string default_id;
  ChoiceSource source = ChoiceSource::default_config;
  std::vector<ConfigTiming> timings;  // of the configs timed, when source == tuned
};

struct TuningPlan {
  std::string default_id;
  std::vector<const Config*> candidates;  // cheapest predicted first
};

// Throws Error(unsupported) when no config of the space can run the problem.
TuningPlan plan_tuning(const ConfigSpace& space, const ProblemKey& key, const DeviceLimits& limits,
                       const TunerSettings& settings);

// Times `candidates` interleaved (failures included, marked !ok) with the op's measurement policy.
std::vector<ConfigTiming> time_candidates(const std::vector<const Config*>& candidates, const ProblemKey& key,
                                          const TunerSettings& settings, Runner& runner);

// The winner among `parts` (timings made together, each with its own timing of the default; one
// part for a process alone) by the winner rule; the default when nothing beat it or nothing ran.
// Logs the outcome.
WinnerChoice decide_winner(const ProblemKey& key, const std::vector<std::vector<ConfigTiming>>& parts,
                           const std::string& default_id, double margin);
std::string decide_winner(const ProblemKey& key, const std::vector<ConfigTiming>& timings,
                          const std::string& default_id, double margin);

TuneOutcome tune_locally(const ConfigSpace& space, const ProblemKey& key, const DeviceLimits& limits,
                         const TunerSettings& settings, Runner& runner);

}  // namespace attnkit::tune
