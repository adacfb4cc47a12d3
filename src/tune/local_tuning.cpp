#include "tune/local_tuning.hpp"

#include <sstream>

#include "attnkit/error.hpp"
#include "core/log.hpp"
#include "tune/candidate_ranking.hpp"

namespace attnkit::tune {
namespace {

using detail::log_enabled;
using detail::log_message;
using detail::LogLevel;

std::string microseconds(double seconds) {
  std::ostringstream out;
  out.precision(4);
  out << seconds * 1e6 << " us";
  return out.str();
}

}  // namespace

std::string_view source_name(ChoiceSource source) {
  switch (source) {
    case ChoiceSource::cached: return "cached";
    case ChoiceSource::tuned: return "tuned";
    case ChoiceSource::default_config: return "default";
  }
  return "?";
}

TuningPlan plan_tuning(const ConfigSpace& space, const ProblemKey& key, const DeviceLimits& limits,
                       const TunerSettings& settings) {
  const CandidateRanking ranking = rank_candidates(space, key.spec, limits);
  const Config* fallback = default_config(space, ranking, key.spec, limits);
  if (fallback == nullptr) {
    std::string reasons;
    for (const auto& rejected : ranking.rejected) {
      if (reasons.size() < 400) reasons += "; " + rejected.config->id + ": " + rejected.reason;
    }
    throw Error(Status::unsupported, "tuner: no config of " + std::string(op_name(space.op)) + "/" +
                                         backend_name(space.backend) + " can run [" + key.text + "]" + reasons);
  }
  TuningPlan plan;
  plan.default_id = fallback->id;
  plan.candidates = configs_to_time(ranking, fallback, settings.top_k, settings.thorough(key.spec.op));
  return plan;
}

std::vector<ConfigTiming> time_candidates(const std::vector<const Config*>& candidates, const ProblemKey& key,
                                          const TunerSettings& settings, Runner& runner) {
  const MeasurementPolicy policy = settings.measurement(key.spec.op);
  std::vector<ConfigTiming> timings;
  for (const Config* config : candidates) {
    ConfigTiming timing = measure_config(runner, *config, policy);
    if (!timing.ok) {
      log_message(LogLevel::warning,
                  "tuner: config " + config->id + " failed on [" + key.text + "] and is excluded: " + timing.error);
    } else if (log_enabled(LogLevel::debug)) {
      log_message(LogLevel::debug, "tuner: [" + key.text + "] " + config->id + ": median " +
                                       microseconds(timing.median_seconds) + " over " + std::to_string(timing.samples) +
                                       " runs");
    }
    timings.push_back(std::move(timing));
  }
  return timings;
}

std::string decide_winner(const ProblemKey& key, const std::vector<ConfigTiming>& timings,
                          const std::string& default_id, double margin) {
  std::string winner = choose_winner(timings, default_id, margin);
  if (winner.empty()) {
    log_message(LogLevel::warning,
                "tuner: every timed config failed on [" + key.text + "]; using the default " + default_id);
    return default_id;
  }
  if (log_enabled(LogLevel::info)) {
    double seconds = 0.0;
    for (const auto& t : timings) {
      if (t.config_id == winner) seconds = t.median_seconds;
    }
    log_message(LogLevel::info, "tuner: [" + key.text + "] -> " + winner + " (" + microseconds(seconds) + ", " +
                                    std::to_string(timings.size()) + " configs timed, default " + default_id + ")");
  }
  return winner;
}

TuneOutcome tune_locally(const ConfigSpace& space, const ProblemKey& key, const DeviceLimits& limits,
                         const TunerSettings& settings, Runner& runner) {
  const TuningPlan plan = plan_tuning(space, key, limits, settings);
  TuneOutcome outcome;
  outcome.default_id = plan.default_id;
  outcome.source = ChoiceSource::tuned;
  if (plan.candidates.size() == 1) {
    // One candidate: the choice is made, and timing it would only delay the call.
    outcome.winner = plan.default_id;
    log_message(LogLevel::info,
                "tuner: [" + key.text + "] -> " + outcome.winner + " (the only candidate; nothing timed)");
    return outcome;
  }
  outcome.timings = time_candidates(plan.candidates, key, settings, runner);
  outcome.winner = decide_winner(key, outcome.timings, plan.default_id, settings.margin);
  return outcome;
}

}  // namespace attnkit::tune
