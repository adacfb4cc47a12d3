// The public tuner control API (include/attnkit/tuner.hpp) over the process's tuners
// (process_tuners.hpp): settings in the public names, a RankGroup made of the caller's collectives,
// and the config a call would run with: its plan's (core/attention_plan.hpp), the one the call runs.
#include <memory>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/tuner.hpp"
#include "core/attention_plan.hpp"
#include "tune/collectives_rank_group.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit {
namespace {

[[noreturn]] void reject(const std::string& message) { throw Error(Status::invalid_argument, message); }

void require_at_least(const char* name, int32_t value, int32_t least) {
  if (value < least) {
    reject(std::string("tuner settings.") + name + ": " + std::to_string(value) +
           "; allowed: >= " + std::to_string(least));
  }
}

tune::TuneMode internal_mode(TuneMode mode) {
  switch (mode) {
    case TuneMode::off: return tune::TuneMode::off;
    case TuneMode::on: return tune::TuneMode::on;
    case TuneMode::load_only: return tune::TuneMode::load_only;
  }
  reject("tuner settings.mode: " + std::to_string(static_cast<int32_t>(mode)) +
         "; allowed: 0 (off), 1 (on), 2 (load-only)");
}

TuneMode public_mode(tune::TuneMode mode) {
  switch (mode) {
    case tune::TuneMode::off: return TuneMode::off;
    case tune::TuneMode::on: return TuneMode::on;
    case tune::TuneMode::load_only: return TuneMode::load_only;
  }
  return TuneMode::load_only;
}

}  // namespace

TunerSettings tuner_settings() {
  const tune::TunerSettings s = tune::process_tuner_settings();
  TunerSettings out;
  out.mode = public_mode(s.mode);
  out.deterministic = s.deterministic;
  out.forward_pass = s.forward_pass;
  out.backward_pass = s.backward_pass;
  out.thorough_mode_forward = s.thorough_mode_forward;
  out.thorough_mode_backward = s.thorough_mode_backward;
  out.warmup_steps_forward = s.warmup_steps_forward;
  out.warmup_steps_backward = s.warmup_steps_backward;
  out.steps_forward = s.steps_forward;
  out.steps_backward = s.steps_backward;
  out.top_k = s.top_k;
  out.cache_dir = s.cache_dir;
  return out;
}

void configure_tuner(const TunerSettings& settings) {
  require_at_least("warmup_steps_forward", settings.warmup_steps_forward, 0);
  require_at_least("warmup_steps_backward", settings.warmup_steps_backward, 0);
  require_at_least("steps_forward", settings.steps_forward, 1);
  require_at_least("steps_backward", settings.steps_backward, 1);
  require_at_least("top_k", settings.top_k, 1);
  // The knobs without a public name (margin, min_steps, spread_threshold) keep their values.
  tune::TunerSettings s = tune::process_tuner_settings();
  s.mode = internal_mode(settings.mode);
  s.deterministic = settings.deterministic;
  s.forward_pass = settings.forward_pass;
  s.backward_pass = settings.backward_pass;
  s.thorough_mode_forward = settings.thorough_mode_forward;
  s.thorough_mode_backward = settings.thorough_mode_backward;
  s.warmup_steps_forward = settings.warmup_steps_forward;
  s.warmup_steps_backward = settings.warmup_steps_backward;
  s.steps_forward = settings.steps_forward;
  s.steps_backward = settings.steps_backward;
  s.top_k = settings.top_k;
  s.cache_dir = settings.cache_dir;
  tune::configure_process_tuners(s);
}

void set_tuner_rank_group(const RankCollectives& group) {
  if (group.size <= 1 || !group.broadcast || !group.all_gather) {
    tune::set_process_rank_group(nullptr, tune::AgreementStrategy::root_tunes);
    return;
  }
  if (group.rank < 0 || group.rank >= group.size) {
    reject("rank group rank: " + std::to_string(group.rank) + " with size " + std::to_string(group.size) +
           "; allowed: 0 <= rank < size");
  }
  tune::AgreementStrategy strategy = tune::AgreementStrategy::root_tunes;
  switch (group.agreement) {
    case Agreement::root_tunes: strategy = tune::AgreementStrategy::root_tunes; break;
    case Agreement::split_configs: strategy = tune::AgreementStrategy::split_configs; break;
    default:
      reject("rank group agreement: " + std::to_string(static_cast<int32_t>(group.agreement)) +
             "; allowed: 0 (root_tunes), 1 (split_configs)");
  }
  tune::set_process_rank_group(tune::rank_group_from_collectives(group), strategy);
}

TunedConfig attention_forward_config(const AttentionForward& problem, const RunOptions& options) {
  return detail::attention_forward_config_of(problem, options);
}

TunedConfig attention_backward_config(const AttentionBackward& problem, const RunOptions& options) {
  return detail::attention_backward_config_of(problem, options);
}

}  // namespace attnkit
