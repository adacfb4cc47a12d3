// Timing candidates in the same conditions, and the rule that picks among them (DESIGN §6.4).
//
// measure_interleaved: all candidates, the default among them, are timed together so that no one
// of them runs while the clocks are still cold or lazily loaded code is still loading, and a drift
// of the device (clocks, temperature, another process) spreads over all of them alike:
//   1. warm-up: rounds in which every candidate runs once, untimed; at least max(warmup_steps, 1)
//      rounds (a first run pays one-time costs that never recur) and, while the rounds' measured
//      time is below min_warmup_seconds, more (at most kMaxWarmupRounds);
//   2. timed rounds: every candidate runs once per round, in an order that rotates by one each
//      round (round r starts with candidate r mod n), so each takes every position equally often;
//      rounds go on until every candidate has min_steps samples and each one's relative spread
//      (p75 - p25) / median is below spread_threshold, or max_steps rounds were made.
// A run that throws, or returns a time that is not finite and positive, excludes its candidate
// (ok = false, with the reason); the others go on.
//
// The winner rule: a candidate other than the default replaces it only when its median beats the
// default's by more than the gain required, max(margin, noise). The noise is what the two medians
// could differ by through sampling alone: three standard errors of their relative difference,
//   noise = 3 * sqrt(se(candidate)^2 + se(default)^2),  se = 0.9291 * (p75 - p25) / (median * sqrt(samples))
// (for each config: sigma ~ IQR / 1.349 and the standard error of a median ~ 1.2533 sigma / sqrt(n)).
// It grows with the spread and shrinks as samples accumulate, needs no resampling, and reads only
// what a cache record holds (median, quartiles, sample count), so a cache file's winner is checked
// again by the same rule when it is loaded (cache_records.hpp). A gain within it is not evidence:
// ties and uncertainty keep the default. Among candidates that pass, the one with the lowest median
// relative to the default it was timed with wins, ties by config id. Only when the default was timed
// and failed every time may the fastest successful candidate replace it without that comparison
// (the default cannot run).
#pragma once
#include <string>
#include <vector>

#include "tune/runner.hpp"

namespace attnkit::tune {

struct MeasurementPolicy {
  int warmup_steps = 5;  // untimed rounds (every candidate once each); at least one is made
  int min_steps = 5;
  int max_steps = 20;
  double spread_threshold = 0.05;
  double min_warmup_seconds = 0.0;  // the warm-up lasts at least this much measured run time, all candidates together
};

// Warm-up rounds made at most to reach min_warmup_seconds.
constexpr int kMaxWarmupRounds = 200;

struct ConfigTiming {
  std::string config_id;
  bool ok = false;
  std::string error;  // why it failed
  double median_seconds = 0.0;
  double p25_seconds = 0.0;
  double p75_seconds = 0.0;
  int samples = 0;
};

// Times `candidates` interleaved (see above). Returns one timing per candidate, in their order.
std::vector<ConfigTiming> measure_interleaved(Runner& runner, const std::vector<const Config*>& candidates,
                                              const MeasurementPolicy& policy);

// One config alone (the same procedure with a single candidate), e.g. for exhaustive sweeps.
ConfigTiming measure_config(Runner& runner, const Config& config, const MeasurementPolicy& policy);

// The standard error of a successful timing's median, relative to the median (infinite for a
// failed timing or one without samples).
double median_standard_error(const ConfigTiming& timing);

// How much two medians may differ by chance: 3 * sqrt(se(a)^2 + se(b)^2), a fraction.
double comparison_noise(const ConfigTiming& a, const ConfigTiming& b);

// The gain `candidate` must show over `baseline`, a fraction of the baseline's median:
// max(margin, comparison_noise(candidate, baseline)).
double required_gain(const ConfigTiming& candidate, const ConfigTiming& baseline, double margin);

// Both ok and candidate.median < baseline.median * (1 - required_gain).
bool beats_default(const ConfigTiming& candidate, const ConfigTiming& baseline, double margin);

enum class WinnerBasis {
  nothing_ran,     // no timing succeeded: id is "", callers use the default
  default_kept,    // the default succeeded and no other config beat it by the rule
  beat_default,    // a non-default beat the default of its part by the rule
  default_failed,  // the default was timed and failed everywhere: the fastest successful config
};

struct WinnerChoice {
  std::string id;
  WinnerBasis basis = WinnerBasis::nothing_ran;
  size_t part = 0;  // the part whose timings prove it (with beat_default: its default was timed there)
};

// `parts`: timings made together (one process's, or one rank's each in a split agreement), each
// with its own timing of the default; a candidate is only compared with the default of its part.
WinnerChoice choose_winner(const std::vector<std::vector<ConfigTiming>>& parts, const std::string& default_id,
                           double margin);

// One part. "" when no timing succeeded.
std::string choose_winner(const std::vector<ConfigTiming>& timings, const std::string& default_id, double margin);

}  // namespace attnkit::tune
