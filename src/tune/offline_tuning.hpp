// Offline tuning for the CLI (DESIGN §6.8): list a problem's configs with their predicted cost
// (dry run), and tune a list of problems into the disk cache, reporting progress as it goes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tune/candidate_ranking.hpp"
#include "tune/tuner.hpp"

namespace attnkit::tune {

struct DryRunReport {
  ProblemKey key;
  std::string default_id;               // "" when nothing is valid
  CandidateRanking ranking;             // valid (cheapest first) and rejected with reasons
  std::vector<std::string> would_time;  // ids timed by a tuning run with the given settings
};

DryRunReport dry_run(const ConfigSpace& space, const ProblemSpec& exact, const DeviceLimits& limits,
                     const TunerSettings& settings);

struct TuneProgress {
  size_t problems_done = 0;
  size_t problems_total = 0;
  size_t configs_timed = 0;  // so far, all problems
  double elapsed_seconds = 0.0;
  double estimated_left_seconds = 0.0;  // elapsed per timed config times the configs still to time
  std::string last_problem;             // key text of the problem just finished
  std::string last_winner;
  ChoiceSource last_source = ChoiceSource::default_config;
};

using RunnerFactory = std::function<std::unique_ptr<Runner>(const ProblemSpec& bucketed)>;
using ProgressCallback = std::function<void(const TuneProgress&)>;

struct OfflineTuneSummary {
  size_t problems = 0;
  size_t tuned = 0;   // benchmarked now
  size_t cached = 0;  // already known (skipped unless force)
  size_t failed = 0;  // could not be tuned (error logged and reported through `errors`)
  size_t configs_timed = 0;
  std::vector<std::string> errors;
};

// Tunes every problem (by its bucket's representative spec) with runners from `make_runner`; the
// tuner writes each result to its disk cache. Problems whose key repeats are tuned once.
OfflineTuneSummary tune_problem_list(Tuner& tuner, const std::vector<ProblemSpec>& problems,
                                     const RunnerFactory& make_runner, const ProgressCallback& progress,
                                     bool force = false);

}  // namespace attnkit::tune
