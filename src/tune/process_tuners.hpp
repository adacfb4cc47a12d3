// The tuners of this process, one per device (the CPU is one device), behind the public control API
// (include/attnkit/tuner.hpp) and used by every dispatched call.
//
// A tuner is created on a device's first call with the settings then in force (the environment's
// until configure_process_tuners() is called) and the rank group then set. Replacing the settings
// keeps the tuners (and their in-memory winners) when the mode and cache folder stay the same, and
// drops them otherwise, so the next call builds a fresh tuner that reads the new cache folder.
// Setting a rank group always drops them: a grouped tuner may only hold agreed winners.
// Callers hold a shared_ptr, so a tuner dropped while another thread uses it lives until that call
// ends. The hit path takes a shared lock and copies a shared_ptr. Every change of settings or group
// also invalidates the cached plans (core/plan_cache.hpp), whose kernel choices came from the tuners.
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include "tune/tuner.hpp"

namespace attnkit::tune {

TunerSettings process_tuner_settings();
void configure_process_tuners(const TunerSettings& settings);

// nullptr (or a group of size <= 1): this process alone.
void set_process_rank_group(std::shared_ptr<RankGroup> group, AgreementStrategy agreement);

// The CPU backend's tuner: the host CPU with all worker threads, the builtin config spaces.
std::shared_ptr<Tuner> cpu_process_tuner();

// CUDA device `device`'s tuner; `describe` (called only when the tuner is created) gives its key and
// limits.
using DeviceDescription = std::pair<DeviceKey, DeviceLimits>;
std::shared_ptr<Tuner> cuda_process_tuner(int device, const std::function<DeviceDescription()>& describe);

// Back to the state of a fresh process: environment settings, no group, no tuners (tests).
void reset_process_tuners();

}  // namespace attnkit::tune
