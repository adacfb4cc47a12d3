// Shared fixtures of the tuner tests: a config space whose predicted costs the test sets, a runner
// that returns scripted timings and counts its calls, temporary cache folders, and small settings
// so that every tuning finishes in microseconds.
#pragma once
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "tune/config_space_registry.hpp"
#include "tune/tuner.hpp"

namespace attnkit::tune::testing {

// "c<i>", built by appending: GCC 12's -Wrestrict misfires on "c" + std::to_string(i).
inline std::string config_id(size_t i) { return std::string("c").append(std::to_string(i)); }

// Configs "c0", "c1", ... predicted to take predicted_us[i] microseconds. Config ids are what the
// tests talk about; the "cost" param keeps the configs distinct for the kernel-set hash.
inline ConfigSpace scripted_space(const std::vector<double>& predicted_us, TuneOp op = TuneOp::attention_forward) {
  ConfigSpace space;
  space.op = op;
  space.backend = Backend::cpu;
  space.description = "scripted test space";
  for (size_t i = 0; i < predicted_us.size(); ++i) {
    Config config;
    config.id = config_id(i);
    config.params = {{"index", static_cast<int64_t>(i)}, {"cost_ns", static_cast<int64_t>(predicted_us[i] * 1000)}};
    space.configs.push_back(config);
  }
  space.estimate = [](const Config& config, const ProblemSpec&, const DeviceLimits&) {
    CostEstimate cost;
    cost.seconds = static_cast<double>(config.param("cost_ns")) * 1e-9;
    return cost;
  };
  return space;
}

inline ConfigSpaceRegistry scripted_registry(const std::vector<double>& predicted_us) {
  ConfigSpaceRegistry registry;
  registry.add(scripted_space(predicted_us, TuneOp::attention_forward));
  registry.add(scripted_space(predicted_us, TuneOp::attention_backward));
  return registry;
}

// Returns seconds_by_id[id] (microseconds given, seconds returned) for every run; ids in `failing`
// throw as a launch failure would. Thread-safe call counting.
class ScriptedRunner : public Runner {
 public:
  explicit ScriptedRunner(std::map<std::string, double> microseconds_by_id, std::set<std::string> failing = {})
      : microseconds_(std::move(microseconds_by_id)), failing_(std::move(failing)) {}

  double measure_seconds(const Config& config, int) override {
    {
      std::lock_guard lock(mutex_);
      ++calls_[config.id];
    }
    if (failing_.count(config.id)) throw Error(Status::cuda_error, "launch failed: too many resources requested");
    const auto it = microseconds_.find(config.id);
    return (it == microseconds_.end() ? 100.0 : it->second) * 1e-6;
  }
  int calls(const std::string& id) const {
    std::lock_guard lock(mutex_);
    const auto it = calls_.find(id);
    return it == calls_.end() ? 0 : it->second;
  }
  int total_calls() const {
    std::lock_guard lock(mutex_);
    int total = 0;
    for (const auto& [id, n] : calls_) total += n;
    return total;
  }
  std::set<std::string> timed_ids() const {
    std::lock_guard lock(mutex_);
    std::set<std::string> ids;
    for (const auto& [id, n] : calls_) ids.insert(id);
    return ids;
  }

 private:
  std::map<std::string, double> microseconds_;
  std::set<std::string> failing_;
  mutable std::mutex mutex_;
  std::map<std::string, int> calls_;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "attnkit-tune-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline ProblemSpec test_problem(int64_t length = 1000, TuneOp op = TuneOp::attention_forward) {
  ProblemSpec spec;
  spec.op = op;
  spec.dtype = DType::f16;
  spec.batch = 2;
  spec.heads_q = 8;
  spec.heads_kv = 2;
  spec.head_dim = 64;
  spec.head_dim_v = 64;
  spec.token_dims = 1;
  spec.tokens = {length, 1, 1};
  spec.tokens_kv = {length, 1, 1};
  spec.mask = MaskKind::causal;
  return spec;
}

inline DeviceLimits test_limits() { return cuda_device_limits(90, 132); }

inline DeviceKey test_device(const ConfigSpaceRegistry& registry) {
  DeviceKey key;
  key.backend = Backend::cpu;
  key.name = "test device";
  key.processors = 4;
  key.library_version = "0.1.0";
  key.kernel_set_hash = registry.kernel_set_hash(Backend::cpu);
  return key;
}

inline TunerSettings fast_settings(TuneMode mode, const std::string& cache_dir = "") {
  TunerSettings settings;
  settings.mode = mode;
  settings.warmup_steps_forward = settings.warmup_steps_backward = 1;
  settings.steps_forward = settings.steps_backward = 5;
  settings.min_steps = 3;
  settings.min_warmup_seconds = 0.0;  // warm-up rounds by count only: scripted times need no clock to warm
  settings.cache_dir = cache_dir;
  return settings;
}

inline TunerOptions test_options(const ConfigSpaceRegistry& registry, TunerSettings settings) {
  TunerOptions options;
  options.device = test_device(registry);
  options.limits = test_limits();
  options.settings = std::move(settings);
  options.registry = &registry;
  return options;
}

}  // namespace attnkit::tune::testing
