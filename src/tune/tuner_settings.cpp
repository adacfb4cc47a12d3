#include "tune/tuner_settings.hpp"

#include <cstdlib>
#include <string>

#include "core/log.hpp"

namespace attnkit::tune {
namespace {

const char* read(const EnvironmentReader& getenv_fn, const char* name) {
  return getenv_fn ? getenv_fn(name) : std::getenv(name);
}

}  // namespace

MeasurementPolicy TunerSettings::measurement(TuneOp op) const {
  MeasurementPolicy policy;
  policy.warmup_steps = is_backward(op) ? warmup_steps_backward : warmup_steps_forward;
  policy.max_steps = is_backward(op) ? steps_backward : steps_forward;
  policy.min_steps = min_steps;
  policy.spread_threshold = spread_threshold;
  policy.min_warmup_seconds = min_warmup_seconds;
  return policy;
}

std::string_view mode_name(TuneMode mode) {
  switch (mode) {
    case TuneMode::off: return "off";
    case TuneMode::on: return "on";
    case TuneMode::load_only: return "load-only";
  }
  return "?";
}

std::optional<TuneMode> parse_mode(std::string_view text) {
  if (text == "off" || text == "0") return TuneMode::off;
  if (text == "on" || text == "1") return TuneMode::on;
  if (text == "load-only" || text == "load_only") return TuneMode::load_only;
  return std::nullopt;
}

std::string default_cache_dir(const EnvironmentReader& getenv_fn) {
  if (const char* dir = read(getenv_fn, "ATTNKIT_CACHE_DIR")) return dir;
  if (const char* home = read(getenv_fn, "HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/attnkit";
  }
  return "";
}

TunerSettings settings_from_environment(const EnvironmentReader& getenv_fn) {
  TunerSettings settings;
  if (const char* mode = read(getenv_fn, "ATTNKIT_TUNE"); mode != nullptr && *mode != '\0') {
    if (const auto parsed = parse_mode(mode)) {
      settings.mode = *parsed;
    } else {
      detail::log_message(detail::LogLevel::warning,
                          std::string("ATTNKIT_TUNE='") + mode + "'; allowed: " + kModeSpellings + "; using load-only");
    }
  }
  if (const char* det = read(getenv_fn, "ATTNKIT_DETERMINISTIC"); det != nullptr && *det != '\0') {
    const std::string value = det;
    if (value == "1" || value == "true" || value == "on")
      settings.deterministic = true;
    else if (value == "0" || value == "false" || value == "off")
      settings.deterministic = false;
    else {
      detail::log_message(detail::LogLevel::warning,
                          "ATTNKIT_DETERMINISTIC='" + value + "' is not one of 1|0|true|false|on|off; using 0");
    }
  }
  settings.cache_dir = default_cache_dir(getenv_fn);
  return settings;
}

}  // namespace attnkit::tune
