// A kernel's tunable configurations for one (op, backend): the choices it was built with (tile sizes,
// warps, stages, threads, ...), what each needs from the device, which problems each can run, and an
// analytical estimate of its run time (DESIGN §5, §6.3). Kernels describe themselves here; the tuner
// knows nothing about any particular kernel.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attnkit/backend.hpp"
#include "tune/device_limits.hpp"
#include "tune/problem_spec.hpp"

namespace attnkit::tune {

// Zero means "no requirement".
struct ResourceNeeds {
  int64_t smem_bytes = 0;
  int32_t registers_per_thread = 0;
  int32_t threads = 0;
};

struct Config {
  std::string id;  // unique in its space, stable across builds: it is stored in cache files
  std::map<std::string, int64_t> params;
  ResourceNeeds resources;
  // The backend's own entry for this config (e.g. a kernel-registry entry), opaque to the tuner: what
  // the tuner chooses is handed back to the backend as this pointer, never as a name to look up.
  const void* entry = nullptr;

  int64_t param(const std::string& name, int64_t fallback = 0) const {
    const auto it = params.find(name);
    return it == params.end() ? fallback : it->second;
  }
};

struct CostEstimate {
  double seconds = 0.0;  // predicted run time
  double flops = 0.0;    // performed, including masked-out and padded tile work
  double bytes = 0.0;    // moved to and from memory, including re-reads of K/V per Q tile
  int64_t tiles = 0;     // blocks launched
  int64_t waves = 0;     // ceil(tiles / concurrent blocks)
};

struct ConfigSpace {
  TuneOp op = TuneOp::attention_forward;
  Backend backend = Backend::cpu;
  // Says what the configs mean; hashed into the kernel-set fingerprint together with every config,
  // so bump it when the kernel's behaviour changes without its configs changing.
  std::string description;
  std::vector<Config> configs;
  // Problem-dependent validity beyond the device resource filters. Returns "" when the config can
  // run the problem, else why not (shown by `attnkit tune --dry-run --all`). Absent = always valid.
  std::function<std::string(const Config&, const ProblemSpec&, const DeviceLimits&)> invalid_reason;
  // Required.
  std::function<CostEstimate(const Config&, const ProblemSpec&, const DeviceLimits&)> estimate;
  // The config used without tuning; must be a pure function of its arguments (DESIGN §6.5).
  // Absent = the valid config with the lowest predicted cost (ties broken by id).
  std::function<std::string(const ProblemSpec&, const DeviceLimits&)> default_config;

  const Config* find(const std::string& id) const {
    for (const auto& config : configs) {
      if (config.id == id) return &config;
    }
    return nullptr;
  }
};

}  // namespace attnkit::tune
