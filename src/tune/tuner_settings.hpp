// The tuner's knobs (DESIGN §6.5, §6.9). Field names follow NATTEN's use_autotuner() where it has
// one (forward_pass, backward_pass, thorough_mode_*, warmup_steps_*, steps_*).
//
// Environment:
//   ATTNKIT_TUNE          = off | on | load-only (default load-only; load_only, 0 and 1 are accepted too)
//       off:       no tuner: every call uses the default config; the cache is not read.
//       load-only: cached winners are used, nothing is ever benchmarked (safe for multi-GPU jobs and
//                  serving; fill the cache offline with `attnkit tune --optimize`).
//       on:        a problem without a cached winner is tuned on its first call (for the directions
//                  enabled by forward_pass / backward_pass).
//   ATTNKIT_DETERMINISTIC = 1|true|on: never benchmark (cached or default configs only), whatever
//                           ATTNKIT_TUNE says.
//   ATTNKIT_CACHE_DIR     = cache folder (default ~/.cache/attnkit; "" disables the disk cache).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tune/measurement.hpp"
#include "tune/problem_spec.hpp"

namespace attnkit::tune {

enum class TuneMode { off, on, load_only };

struct TunerSettings {
  TuneMode mode = TuneMode::load_only;
  bool deterministic = false;
  bool forward_pass = true;
  bool backward_pass = true;
  bool thorough_mode_forward = false;
  bool thorough_mode_backward = false;
  int warmup_steps_forward = 5;
  int warmup_steps_backward = 5;
  int steps_forward = 20;  // most timed runs per config (fewer when the spread settles)
  int steps_backward = 20;
  int min_steps = 5;
  double spread_threshold = 0.05;
  // The shared warm-up lasts at least this much measured run time (all candidates together, at most
  // kMaxWarmupRounds rounds), so that short kernels are not timed on clocks that are still rising.
  double min_warmup_seconds = 0.01;
  int top_k = 4;
  double margin = 0.03;   // a non-default must beat the default by more than max(margin, measured noise)
  std::string cache_dir;  // "" = memory only

  bool thorough(TuneOp op) const { return is_backward(op) ? thorough_mode_backward : thorough_mode_forward; }
  bool enabled(TuneOp op) const { return is_backward(op) ? backward_pass : forward_pass; }
  MeasurementPolicy measurement(TuneOp op) const;
};

std::string_view mode_name(TuneMode mode);  // "off", "on", "load-only"

// "off", "on", "load-only" (the documented spelling) and "load_only" (Python's identifier style),
// plus "0" and "1" for off and on; nullopt for anything else. Every front end parses modes here.
std::optional<TuneMode> parse_mode(std::string_view text);

// What parse_mode accepts, for messages: "off, on, load-only (also spelled load_only)".
constexpr const char* kModeSpellings = "off, on, load-only (also spelled load_only)";

using EnvironmentReader = std::function<const char*(const char*)>;

// Defaults overridden by the environment; unrecognised values are logged and ignored.
TunerSettings settings_from_environment(const EnvironmentReader& getenv_fn = nullptr);

// $ATTNKIT_CACHE_DIR when set, else $HOME/.cache/attnkit, else "".
std::string default_cache_dir(const EnvironmentReader& getenv_fn = nullptr);

}  // namespace attnkit::tune
