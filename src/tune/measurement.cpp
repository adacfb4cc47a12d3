#include "tune/measurement.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

namespace attnkit::tune {
namespace {

// Linear interpolation between closest ranks of sorted values.
double quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(position));
  const size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(lower);
  return sorted[lower] + (sorted[upper] - sorted[lower]) * fraction;
}

void summarise(std::vector<double> samples, ConfigTiming& timing) {
  std::sort(samples.begin(), samples.end());
  timing.median_seconds = quantile(samples, 0.5);
  timing.p25_seconds = quantile(samples, 0.25);
  timing.p75_seconds = quantile(samples, 0.75);
  timing.samples = static_cast<int>(samples.size());
}

bool settled(const std::vector<double>& samples, double threshold) {
  if (samples.empty()) return false;
  ConfigTiming t;
  summarise(samples, t);
  return (t.p75_seconds - t.p25_seconds) / t.median_seconds < threshold;
}

// The state of one measurement: candidates, their samples so far, and the run counter the runner
// rotates its buffers by.
class Interleaving {
 public:
  Interleaving(Runner& runner, const std::vector<const Config*>& candidates)
      : runner_(runner), candidates_(candidates), timings_(candidates.size()), samples_(candidates.size()) {
    for (size_t i = 0; i < candidates.size(); ++i) timings_[i].config_id = candidates[i]->id;
  }

  bool any_left() const {
    return std::any_of(timings_.begin(), timings_.end(), [](const ConfigTiming& t) { return t.error.empty(); });
  }

  // One round: every candidate still in runs once, starting with candidate `round` mod n. Returns
  // the measured time of the round.
  double run_round(int round, bool keep_samples) {
    double total = 0.0;
    const size_t n = candidates_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (static_cast<size_t>(round) + k) % n;
      if (!timings_[i].error.empty()) continue;
      const double seconds = run(i);
      total += seconds;
      if (keep_samples && seconds > 0.0) samples_[i].push_back(seconds);
    }
    return total;
  }

  bool all_settled(double threshold) const {
    for (size_t i = 0; i < timings_.size(); ++i) {
      if (timings_[i].error.empty() && !settled(samples_[i], threshold)) return false;
    }
    return true;
  }

  std::vector<ConfigTiming> finish() {
    for (size_t i = 0; i < timings_.size(); ++i) {
      if (!timings_[i].error.empty() || samples_[i].empty()) continue;
      summarise(samples_[i], timings_[i]);
      timings_[i].ok = true;
    }
    return std::move(timings_);
  }

 private:
  // Runs candidate i once; returns its time, or 0 after excluding it.
  double run(size_t i) {
    double seconds = 0.0;
    try {
      seconds = runner_.measure_seconds(*candidates_[i], iteration_++);
    } catch (const std::exception& e) {
      return exclude(i, e.what());
    } catch (...) {
      return exclude(i, "unknown exception");
    }
    if (!std::isfinite(seconds) || seconds <= 0.0) {
      return exclude(i, "the runner reported a time of " + std::to_string(seconds) + " s");
    }
    return seconds;
  }

  double exclude(size_t i, std::string reason) {
    timings_[i].error = reason.empty() ? std::string("failed without a message") : std::move(reason);
    samples_[i].clear();
    return 0.0;
  }

  Runner& runner_;
  const std::vector<const Config*>& candidates_;
  std::vector<ConfigTiming> timings_;  // error set = excluded
  std::vector<std::vector<double>> samples_;
  int iteration_ = 0;
};

}  // namespace

std::vector<ConfigTiming> measure_interleaved(Runner& runner, const std::vector<const Config*>& candidates,
                                              const MeasurementPolicy& policy) {
  Interleaving measurement(runner, candidates);
  const int warmup_rounds = std::max(policy.warmup_steps, 1);
  double warm_seconds = 0.0;
  for (int round = 0; measurement.any_left(); ++round) {
    const bool warm_enough = warm_seconds >= policy.min_warmup_seconds || round >= kMaxWarmupRounds;
    if (round >= warmup_rounds && warm_enough) break;
    warm_seconds += measurement.run_round(round, /*keep_samples=*/false);
  }
  const int max_steps = std::max(policy.max_steps, 1);
  const int min_steps = std::clamp(policy.min_steps, 1, max_steps);
  for (int round = 0; round < max_steps && measurement.any_left(); ++round) {
    measurement.run_round(round, /*keep_samples=*/true);
    if (round + 1 >= min_steps && measurement.all_settled(policy.spread_threshold)) break;
  }
  return measurement.finish();
}

ConfigTiming measure_config(Runner& runner, const Config& config, const MeasurementPolicy& policy) {
  return measure_interleaved(runner, {&config}, policy).front();
}

double median_standard_error(const ConfigTiming& timing) {
  if (!timing.ok || timing.median_seconds <= 0.0 || timing.samples < 1) return std::numeric_limits<double>::infinity();
  // sigma ~ IQR / 1.349 for a normal distribution; the median's standard error ~ 1.2533 sigma / sqrt(n).
  constexpr double kIqrToMedianError = 1.2533 / 1.349;
  const double iqr = std::max(timing.p75_seconds - timing.p25_seconds, 0.0);
  return kIqrToMedianError * iqr / (timing.median_seconds * std::sqrt(static_cast<double>(timing.samples)));
}

double comparison_noise(const ConfigTiming& a, const ConfigTiming& b) {
  const double se_a = median_standard_error(a);
  const double se_b = median_standard_error(b);
  return 3.0 * std::sqrt(se_a * se_a + se_b * se_b);
}

double required_gain(const ConfigTiming& candidate, const ConfigTiming& baseline, double margin) {
  return std::max(margin, comparison_noise(candidate, baseline));
}

bool beats_default(const ConfigTiming& candidate, const ConfigTiming& baseline, double margin) {
  if (!candidate.ok || !baseline.ok) return false;
  const double gain = required_gain(candidate, baseline, margin);
  return gain < 1.0 && candidate.median_seconds < baseline.median_seconds * (1.0 - gain);
}

WinnerChoice choose_winner(const std::vector<std::vector<ConfigTiming>>& parts, const std::string& default_id,
                           double margin) {
  WinnerChoice best;
  double best_ratio = std::numeric_limits<double>::infinity();
  bool default_ran = false;
  bool default_failed = false;
  size_t default_part = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const ConfigTiming* baseline = nullptr;
    for (const auto& t : parts[p]) {
      if (t.config_id != default_id) continue;
      if (t.ok) {
        baseline = &t;
      } else {
        default_failed = true;
      }
    }
    if (baseline == nullptr) continue;
    if (!default_ran) default_part = p;
    default_ran = true;
    for (const auto& t : parts[p]) {
      if (t.config_id == default_id || !beats_default(t, *baseline, margin)) continue;
      // Medians of different parts (ranks, GPUs) are compared through their own default.
      const double ratio = t.median_seconds / baseline->median_seconds;
      if (ratio < best_ratio || (ratio == best_ratio && t.config_id < best.id)) {
        best = {t.config_id, WinnerBasis::beat_default, p};
        best_ratio = ratio;
      }
    }
  }
  if (!best.id.empty()) return best;
  if (default_ran) return {default_id, WinnerBasis::default_kept, default_part};
  if (!default_failed) return best;  // the default was not timed: nothing shows another config is better
  const ConfigTiming* fastest = nullptr;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const auto& t : parts[p]) {
      if (!t.ok) continue;
      if (fastest == nullptr || t.median_seconds < fastest->median_seconds ||
          (t.median_seconds == fastest->median_seconds && t.config_id < fastest->config_id)) {
        fastest = &t;
        best = {t.config_id, WinnerBasis::default_failed, p};
      }
    }
  }
  return best;
}

std::string choose_winner(const std::vector<ConfigTiming>& timings, const std::string& default_id, double margin) {
  return choose_winner(std::vector<std::vector<ConfigTiming>>{timings}, default_id, margin).id;
}

}  // namespace attnkit::tune
