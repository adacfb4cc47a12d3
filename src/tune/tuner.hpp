// The auto-tuner of one device (DESIGN §6): answers "which config runs this problem" for every
// call, from memory when it can (a hash lookup under a shared lock), else from the disk cache, else
// by tuning — when the settings, the caller and the moment allow it — else with the default config.
//
// choose() order:
//   1. a winner in memory (tuned or agreed earlier, or loaded from the disk cache) -> cached;
//   2. mode off, or the caller is capturing a CUDA graph -> the default (no collective, no timing);
//   3. in a rank group: the ranks agree (rank_agreement.hpp) and every rank stores the same winner;
//   4. alone: tune when allowed (mode on, not deterministic, the direction enabled, a runner given),
//      else the default.
// Tuned results are written to the disk cache (in a group, by the root only), the winner with the
// default it was timed against and both timings. The tuner never loses to the default: every path
// returns the default unless a timed comparison (measurement.hpp's winner rule) picked another
// config, now or when the cached winner was tuned; a cached winner whose records do not show that
// is dropped when the cache is loaded (cache_problems() says why).
// Defaults are a pure function of the problem key and the device limits, so a deterministic run
// or a rank that must not benchmark picks the same config every time.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tune/config_space_registry.hpp"
#include "tune/decision_cache.hpp"
#include "tune/device_key.hpp"
#include "tune/local_tuning.hpp"
#include "tune/rank_agreement.hpp"

namespace attnkit::tune {

struct TuneChoice {
  const Config* config = nullptr;
  ChoiceSource source = ChoiceSource::default_config;
};

struct TunerOptions {
  DeviceKey device;
  DeviceLimits limits;
  TunerSettings settings;
  const ConfigSpaceRegistry* registry = nullptr;  // nullptr = builtin_config_spaces()
  std::shared_ptr<RankGroup> group;               // nullptr = this process alone
  AgreementStrategy agreement = AgreementStrategy::root_tunes;
};

class Tuner {
 public:
  // Reads the disk cache (unless mode is off or there is no cache folder).
  explicit Tuner(TunerOptions options);

  // The config for `key` on this device. `runner` may be null (then nothing is timed); `capturing`
  // is the caller's cudaStreamIsCapturing. Throws Error(unsupported) when the op has no config
  // space on this backend or no config can run the problem.
  TuneChoice choose(const ProblemKey& key, Runner* runner, bool capturing = false);

  // Offline tuning in this process: tunes `key` whatever the mode says, unless a winner is already
  // known and !force. Writes the result to the disk cache.
  TuneOutcome tune(const ProblemKey& key, Runner& runner, bool force = false);

  // The config used without tuning. Pure function of the key and the device limits.
  const Config* default_choice(const ProblemKey& key);

  // A copy: settings can be replaced while other threads choose.
  TunerSettings settings() const;
  // Replaces the settings that do not decide what is loaded (steps, toggles, thoroughness, ...).
  // Throws Error(invalid_argument) when `settings` changes the mode or the cache folder: those need a
  // new Tuner (process_tuners.hpp rebuilds it).
  void update_settings(const TunerSettings& settings);
  const DeviceKey& device() const { return options_.device; }
  const DeviceLimits& limits() const { return options_.limits; }
  const ConfigSpaceRegistry& registry() const { return *options_.registry; }
  // Why parts of the disk cache were ignored when it was loaded (also logged as warnings): unreadable
  // or foreign files, winners that name no config of this build or lack the evidence that they beat
  // their default.
  const std::vector<std::string>& cache_problems() const { return cache_problems_; }
  size_t known_winners() const { return winners_.size(); }

 private:
  const ConfigSpace& space_for(TuneOp op) const;
  static bool may_benchmark(const TunerSettings& settings, TuneOp op, const Runner* runner);
  bool grouped() const { return options_.group != nullptr && options_.group->size() > 1; }
  void load_disk_cache();
  void persist(const ProblemKey& key, const TuneOutcome& outcome);
  const Config* resolve(const ConfigSpace& space, const ProblemKey& key, const std::string& id);
  // Records a winner found now (tuned or agreed) and invalidates the cached plans.
  void learn(const ProblemKey& key, const Config* config);

  TunerOptions options_;  // options_.settings is guarded by settings_mutex_
  mutable std::mutex settings_mutex_;
  const std::string cache_dir_;  // fixed for the tuner's life, read without the lock
  DecisionCache winners_;        // final choices; in a group, only ever filled by agreement
  DecisionCache defaults_;       // defaults memoised while tuning was not allowed; never shadow a later tuning
  std::unordered_map<std::string, const Config*> disk_winners_;  // by problem text
  std::vector<std::string> cache_problems_;
  std::mutex tuning_mutex_;  // one tuning (or agreement) at a time
};

}  // namespace attnkit::tune
