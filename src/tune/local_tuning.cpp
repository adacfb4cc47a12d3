#include "tune/local_tuning.hpp"

#include <algorithm>
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

const ConfigTiming* find_timing(const std::vector<ConfigTiming>& timings, const std::string& id) {
  for (const auto& t : timings) {
    if (t.config_id == id && t.ok) return &t;
  }
  return nullptr;
}

std::string ratio_text(double ratio) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << ratio << "x";
  return out.str();
}

std::string percent(double fraction) {
  std::ostringstream out;
  out.precision(3);
  out << fraction * 100 << " %";
  return out.str();
}

// "[key] -> winner (...)": the winner's median against the default's, and the gain a non-default
// needed. For a kept default, the closest contender is named.
std::string explain_choice(const ProblemKey& key, const std::vector<ConfigTiming>& part, const WinnerChoice& choice,
                           const std::string& default_id, double margin) {
  const ConfigTiming* baseline = find_timing(part, default_id);
  const ConfigTiming* contender = nullptr;
  if (choice.basis == WinnerBasis::beat_default) {
    contender = find_timing(part, choice.id);
  } else {
    for (const auto& t : part) {
      if (t.ok && t.config_id != default_id && (contender == nullptr || t.median_seconds < contender->median_seconds)) {
        contender = &t;
      }
    }
  }
  std::string text = "tuner: [" + key.text + "] -> " + choice.id;
  if (baseline == nullptr) return text;
  if (contender == nullptr) {
    return text + " (the default, " + microseconds(baseline->median_seconds) + "; no other config ran)";
  }
  const double gain = required_gain(*contender, *baseline, margin);
  const std::string rule = "a non-default needs < " + ratio_text(1.0 - gain) + " (margin " + percent(margin) +
                           ", noise " + percent(comparison_noise(*contender, *baseline)) + ")";
  const std::string ratio = ratio_text(contender->median_seconds / baseline->median_seconds);
  if (choice.basis == WinnerBasis::beat_default) {
    return text + " (" + microseconds(contender->median_seconds) + ", " + ratio + " the default " + default_id + "'s " +
           microseconds(baseline->median_seconds) + "; " + rule + ")";
  }
  return text + " (the default, " + microseconds(baseline->median_seconds) + "; the fastest other, " +
         contender->config_id + ", ran at " + ratio + "; " + rule + ")";
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
  std::vector<ConfigTiming> timings = measure_interleaved(runner, candidates, settings.measurement(key.spec.op));
  for (const auto& timing : timings) {
    if (!timing.ok) {
      log_message(LogLevel::warning, "tuner: config " + timing.config_id + " failed on [" + key.text +
                                         "] and is excluded: " + timing.error);
    } else if (log_enabled(LogLevel::debug)) {
      log_message(LogLevel::debug, "tuner: [" + key.text + "] " + timing.config_id + ": median " +
                                       microseconds(timing.median_seconds) + " (p25 " +
                                       microseconds(timing.p25_seconds) + ", p75 " + microseconds(timing.p75_seconds) +
                                       ") over " + std::to_string(timing.samples) + " interleaved runs");
    }
  }
  return timings;
}

WinnerChoice decide_winner(const ProblemKey& key, const std::vector<std::vector<ConfigTiming>>& parts,
                           const std::string& default_id, double margin) {
  WinnerChoice choice = choose_winner(parts, default_id, margin);
  size_t timed = 0;
  for (const auto& part : parts) timed += part.size();
  const std::string count = std::to_string(timed) + " timings";
  switch (choice.basis) {
    case WinnerBasis::nothing_ran:
      log_message(LogLevel::warning, "tuner: no timing of the default " + default_id + " succeeded on [" + key.text +
                                         "] (" + count + "); keeping the default");
      choice.id = default_id;
      break;
    case WinnerBasis::default_failed:
      log_message(LogLevel::warning, "tuner: the default " + default_id + " failed on [" + key.text +
                                         "]; using the fastest config that ran, " + choice.id + " (" +
                                         microseconds(find_timing(parts[choice.part], choice.id)->median_seconds) +
                                         ")");
      break;
    case WinnerBasis::beat_default:
    case WinnerBasis::default_kept:
      if (log_enabled(LogLevel::info)) {
        log_message(LogLevel::info, explain_choice(key, parts[choice.part], choice, default_id, margin) + "; " + count);
      }
      break;
  }
  return choice;
}

std::string decide_winner(const ProblemKey& key, const std::vector<ConfigTiming>& timings,
                          const std::string& default_id, double margin) {
  return decide_winner(key, std::vector<std::vector<ConfigTiming>>{timings}, default_id, margin).id;
}

TuneOutcome tune_locally(const ConfigSpace& space, const ProblemKey& key, const DeviceLimits& limits,
                         const TunerSettings& settings, Runner& runner) {
  const TuningPlan plan = plan_tuning(space, key, limits, settings);
  TuneOutcome outcome;
  outcome.default_id = plan.default_id;
  outcome.source = ChoiceSource::tuned;
  if (plan.candidates.size() == 1) {
    // One candidate is the default (configs_to_time always adds it): nothing could replace it, and
    // timing it would only delay the call.
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
