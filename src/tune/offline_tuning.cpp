#include "tune/offline_tuning.hpp"

#include <chrono>
#include <set>

#include "attnkit/error.hpp"

namespace attnkit::tune {

DryRunReport dry_run(const ConfigSpace& space, const ProblemSpec& exact, const DeviceLimits& limits,
                     const TunerSettings& settings) {
  DryRunReport report;
  report.key = make_problem_key(exact);
  report.ranking = rank_candidates(space, report.key.spec, limits);
  const Config* fallback = default_config(space, report.ranking, report.key.spec, limits);
  if (fallback != nullptr) {
    report.default_id = fallback->id;
    for (const Config* config :
         configs_to_time(report.ranking, fallback, settings.top_k, settings.thorough(report.key.spec.op))) {
      report.would_time.push_back(config->id);
    }
  }
  return report;
}

OfflineTuneSummary tune_problem_list(Tuner& tuner, const std::vector<ProblemSpec>& problems,
                                     const RunnerFactory& make_runner, const ProgressCallback& progress, bool force) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  OfflineTuneSummary summary;
  summary.problems = problems.size();

  // Configs each problem will time, for the time-left estimate.
  std::vector<ProblemKey> keys;
  std::vector<size_t> planned;
  size_t planned_total = 0;
  for (const auto& spec : problems) {
    keys.push_back(make_problem_key(spec));
    size_t count = 0;
    if (const ConfigSpace* space = tuner.registry().find(spec.op, tuner.device().backend)) {
      count = dry_run(*space, spec, tuner.limits(), tuner.settings()).would_time.size();
    }
    planned.push_back(count);
    planned_total += count;
  }

  std::set<std::string> seen;
  size_t planned_done = 0;
  TuneProgress state;
  state.problems_total = problems.size();
  for (size_t i = 0; i < problems.size(); ++i) {
    const ProblemKey& key = keys[i];
    planned_done += planned[i];
    if (seen.insert(key.text).second) {
      try {
        std::unique_ptr<Runner> runner = make_runner(key.spec);
        if (!runner) throw Error(Status::unsupported, "no runner for " + std::string(op_name(key.spec.op)));
        const TuneOutcome outcome = tuner.tune(key, *runner, force);
        state.last_winner = outcome.winner;
        state.last_source = outcome.source;
        if (outcome.source == ChoiceSource::tuned) {
          ++summary.tuned;
          summary.configs_timed += outcome.timings.size();
        } else {
          ++summary.cached;
        }
      } catch (const std::exception& e) {
        ++summary.failed;
        summary.errors.push_back("[" + key.text + "]: " + e.what());
        state.last_winner.clear();
        state.last_source = ChoiceSource::default_config;
      }
    } else {
      ++summary.cached;
    }
    state.problems_done = i + 1;
    state.configs_timed = summary.configs_timed;
    state.last_problem = key.text;
    state.elapsed_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double per_config = planned_done > 0 ? state.elapsed_seconds / static_cast<double>(planned_done) : 0.0;
    state.estimated_left_seconds = per_config * static_cast<double>(planned_total - planned_done);
    if (progress) progress(state);
  }
  return summary;
}

}  // namespace attnkit::tune
