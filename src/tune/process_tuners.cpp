#include "tune/process_tuners.hpp"

#include <map>
#include <optional>
#include <shared_mutex>

#include "core/plan_cache.hpp"

namespace attnkit::tune {
namespace {

struct ProcessTuners {
  std::shared_mutex mutex;
  std::optional<TunerSettings> settings;  // empty until first use: then read from the environment
  std::shared_ptr<RankGroup> group;
  AgreementStrategy agreement = AgreementStrategy::root_tunes;
  std::shared_ptr<Tuner> cpu;
  std::map<int, std::shared_ptr<Tuner>> cuda;

  // Caller holds the unique lock.
  const TunerSettings& settings_locked() {
    if (!settings) settings = settings_from_environment();
    return *settings;
  }
  TunerOptions options_locked(DeviceKey device, DeviceLimits limits) {
    TunerOptions options;
    options.device = std::move(device);
    options.limits = limits;
    options.settings = settings_locked();
    options.registry = &builtin_config_spaces();
    options.group = group;
    options.agreement = agreement;
    return options;
  }
};

ProcessTuners& state() {
  static ProcessTuners tuners;
  return tuners;
}

}  // namespace

TunerSettings process_tuner_settings() {
  ProcessTuners& s = state();
  {
    std::shared_lock lock(s.mutex);
    if (s.settings) return *s.settings;
  }
  std::unique_lock lock(s.mutex);
  return s.settings_locked();
}

void configure_process_tuners(const TunerSettings& settings) {
  ProcessTuners& s = state();
  std::unique_lock lock(s.mutex);
  // Any setting may change what a new plan would choose (mode, toggles, deterministic, cache folder).
  detail::invalidate_plans();
  const TunerSettings& old = s.settings_locked();
  const bool same_source = old.mode == settings.mode && old.cache_dir == settings.cache_dir;
  s.settings = settings;
  if (!same_source) {
    s.cpu.reset();
    s.cuda.clear();
    return;
  }
  if (s.cpu) s.cpu->update_settings(settings);
  for (auto& [device, tuner] : s.cuda) tuner->update_settings(settings);
}

void set_process_rank_group(std::shared_ptr<RankGroup> group, AgreementStrategy agreement) {
  ProcessTuners& s = state();
  std::unique_lock lock(s.mutex);
  detail::invalidate_plans();
  s.group = group != nullptr && group->size() > 1 ? std::move(group) : nullptr;
  s.agreement = agreement;
  s.cpu.reset();
  s.cuda.clear();
}

std::shared_ptr<Tuner> cpu_process_tuner() {
  ProcessTuners& s = state();
  {
    std::shared_lock lock(s.mutex);
    if (s.cpu) return s.cpu;
  }
  std::unique_lock lock(s.mutex);
  if (!s.cpu) {
    const ConfigSpaceRegistry& registry = builtin_config_spaces();
    DeviceKey key = cpu_device_key(0, registry);
    const DeviceLimits limits = cpu_device_limits(key.processors);
    s.cpu = std::make_shared<Tuner>(s.options_locked(std::move(key), limits));
  }
  return s.cpu;
}

std::shared_ptr<Tuner> cuda_process_tuner(int device, const std::function<DeviceDescription()>& describe) {
  ProcessTuners& s = state();
  {
    std::shared_lock lock(s.mutex);
    const auto it = s.cuda.find(device);
    if (it != s.cuda.end()) return it->second;
  }
  DeviceDescription description = describe();  // outside the lock: it may call the CUDA runtime
  std::unique_lock lock(s.mutex);
  auto& slot = s.cuda[device];
  if (!slot) slot = std::make_shared<Tuner>(s.options_locked(std::move(description.first), description.second));
  return slot;
}

void reset_process_tuners() {
  ProcessTuners& s = state();
  std::unique_lock lock(s.mutex);
  detail::invalidate_plans();
  s.settings.reset();
  s.group.reset();
  s.agreement = AgreementStrategy::root_tunes;
  s.cpu.reset();
  s.cuda.clear();
}

}  // namespace attnkit::tune
