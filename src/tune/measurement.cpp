#include "tune/measurement.hpp"

#include <algorithm>
#include <cmath>
#include <exception>

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

}  // namespace

ConfigTiming measure_config(Runner& runner, const Config& config, const MeasurementPolicy& policy) {
  ConfigTiming timing;
  timing.config_id = config.id;
  const int max_steps = std::max(policy.max_steps, 1);
  const int min_steps = std::clamp(policy.min_steps, 1, max_steps);
  std::vector<double> samples;
  int iteration = 0;
  try {
    for (int i = 0; i < policy.warmup_steps; ++i) runner.measure_seconds(config, iteration++);
    while (static_cast<int>(samples.size()) < max_steps) {
      const double seconds = runner.measure_seconds(config, iteration++);
      if (!std::isfinite(seconds) || seconds <= 0.0) {
        timing.error = "the runner reported a time of " + std::to_string(seconds) + " s";
        return timing;
      }
      samples.push_back(seconds);
      if (static_cast<int>(samples.size()) >= min_steps) {
        summarise(samples, timing);
        if ((timing.p75_seconds - timing.p25_seconds) / timing.median_seconds < policy.spread_threshold) break;
      }
    }
  } catch (const std::exception& e) {
    timing.error = e.what();
    return timing;
  } catch (...) {
    timing.error = "unknown exception";
    return timing;
  }
  summarise(samples, timing);
  timing.ok = true;
  return timing;
}

std::string choose_winner(const std::vector<ConfigTiming>& timings, const std::string& default_id, double margin) {
  const ConfigTiming* best = nullptr;
  const ConfigTiming* baseline = nullptr;
  for (const auto& t : timings) {
    if (!t.ok) continue;
    if (t.config_id == default_id) baseline = &t;
    if (best == nullptr || t.median_seconds < best->median_seconds ||
        (t.median_seconds == best->median_seconds && t.config_id < best->config_id)) {
      best = &t;
    }
  }
  if (best == nullptr) return "";
  if (baseline != nullptr && best != baseline && !(best->median_seconds < baseline->median_seconds * (1.0 - margin))) {
    return baseline->config_id;
  }
  return best->config_id;
}

}  // namespace attnkit::tune
