#include "tune/tuner.hpp"

#include <filesystem>

#include "attnkit/error.hpp"
#include "core/log.hpp"
#include "core/plan_cache.hpp"
#include "tune/cache_file.hpp"
#include "tune/candidate_ranking.hpp"
#include "tune/stable_hash.hpp"

namespace attnkit::tune {

using detail::log_message;
using detail::LogLevel;

Tuner::Tuner(TunerOptions options) : options_(std::move(options)), cache_dir_(options_.settings.cache_dir) {
  if (options_.registry == nullptr) options_.registry = &builtin_config_spaces();
  if (options_.settings.mode != TuneMode::off && !cache_dir_.empty()) load_disk_cache();
}

const ConfigSpace& Tuner::space_for(TuneOp op) const {
  const ConfigSpace* space = options_.registry->find(op, options_.device.backend);
  if (space == nullptr) {
    throw Error(Status::unsupported, "tuner: no config space is registered for " + std::string(op_name(op)) +
                                         " on the " + backend_name(options_.device.backend) + " backend");
  }
  return *space;
}

bool Tuner::may_benchmark(const TunerSettings& s, TuneOp op, const Runner* runner) {
  return runner != nullptr && s.mode == TuneMode::on && !s.deterministic && s.enabled(op);
}

TunerSettings Tuner::settings() const {
  std::lock_guard lock(settings_mutex_);
  return options_.settings;
}

void Tuner::update_settings(const TunerSettings& settings) {
  std::lock_guard lock(settings_mutex_);
  if (settings.mode != options_.settings.mode || settings.cache_dir != options_.settings.cache_dir) {
    throw Error(Status::invalid_argument, "tuner: update_settings cannot change the mode ('" +
                                              std::string(mode_name(options_.settings.mode)) + "' -> '" +
                                              std::string(mode_name(settings.mode)) +
                                              "') or the cache folder; allowed: build a new Tuner");
  }
  options_.settings = settings;
}

void Tuner::load_disk_cache() {
  const std::filesystem::path file = cache_file_path(cache_dir_, options_.device);
  CacheLoad load = read_cache_file(file, &options_.device);
  cache_problems_ = load.problems;
  const auto drop = [&](const WinnerRecord& record, const std::string& why) {
    cache_problems_.push_back(file.string() + ": winner '" + record.config + "' of [" + record.problem + "] " + why +
                              "; ignored");
    log_message(LogLevel::warning, "tune cache: " + cache_problems_.back());
  };
  // Only a winner whose own records show it beating its default is trusted (DESIGN §6.4): a cache
  // must never make a problem slower than the untuned default.
  const std::vector<std::string> unproven = winner_evidence_problems(load.contents, options_.settings.margin);
  for (size_t i = 0; i < load.contents.winners.size(); ++i) {
    const WinnerRecord& record = load.contents.winners[i];
    const auto op = parse_op(record.problem.substr(0, record.problem.find(' ')));
    const ConfigSpace* space = op ? options_.registry->find(*op, options_.device.backend) : nullptr;
    const Config* config = space ? space->find(record.config) : nullptr;
    if (config == nullptr) {
      drop(record, "is not a config of this build");
      continue;
    }
    if (!unproven[i].empty()) {
      drop(record, unproven[i]);
      continue;
    }
    disk_winners_[record.problem] = config;
    // Alone, a disk winner is as good as a tuned one; in a group only the root's counts (by agreement).
    if (!grouped()) winners_.insert(stable_hash(record.problem), record.problem, config);
  }
  log_message(LogLevel::info,
              "tune cache: " + std::to_string(disk_winners_.size()) + " winners loaded from " + file.string());
}

const Config* Tuner::resolve(const ConfigSpace& space, const ProblemKey& key, const std::string& id) {
  if (const Config* config = space.find(id)) return config;
  if (!id.empty()) log_message(LogLevel::warning, "tuner: unknown config '" + id + "' for [" + key.text + "]");
  return default_choice(key);
}

const Config* Tuner::default_choice(const ProblemKey& key) {
  if (const Config* memo = defaults_.find(key)) return memo;
  const ConfigSpace& space = space_for(key.spec.op);
  const CandidateRanking ranking = rank_candidates(space, key.spec, options_.limits);
  const Config* config = default_config(space, ranking, key.spec, options_.limits);
  if (config == nullptr) {
    throw Error(Status::unsupported, "tuner: no config of " + std::string(op_name(space.op)) + "/" +
                                         backend_name(space.backend) + " can run [" + key.text + "]");
  }
  defaults_.insert(key, config);
  return config;
}

TuneChoice Tuner::choose(const ProblemKey& key, Runner* runner, bool capturing) {
  if (const Config* config = winners_.find(key)) return {config, ChoiceSource::cached};
  const TunerSettings settings = this->settings();
  if (settings.mode == TuneMode::off || capturing) return {default_choice(key), ChoiceSource::default_config};
  const ConfigSpace& space = space_for(key.spec.op);

  if (grouped()) {
    std::lock_guard lock(tuning_mutex_);
    if (const Config* config = winners_.find(key)) return {config, ChoiceSource::cached};
    AgreementInputs inputs;
    inputs.space = &space;
    inputs.key = &key;
    inputs.limits = &options_.limits;
    inputs.settings = &settings;
    const auto disk = disk_winners_.find(key.text);
    inputs.cached_winner = disk == disk_winners_.end() ? nullptr : disk->second;
    inputs.may_benchmark = may_benchmark(settings, key.spec.op, runner);
    inputs.runner = runner;
    const TuneOutcome outcome = agree_on_config(*options_.group, options_.agreement, inputs);
    const Config* config = resolve(space, key, outcome.winner);
    learn(key, config);
    if (outcome.source == ChoiceSource::tuned && options_.group->rank() == kRootRank) persist(key, outcome);
    return {config, outcome.source};
  }

  if (!may_benchmark(settings, key.spec.op, runner)) return {default_choice(key), ChoiceSource::default_config};
  std::lock_guard lock(tuning_mutex_);
  if (const Config* config = winners_.find(key)) return {config, ChoiceSource::cached};
  const TuneOutcome outcome = tune_locally(space, key, options_.limits, settings, *runner);
  const Config* config = resolve(space, key, outcome.winner);
  learn(key, config);
  persist(key, outcome);
  return {config, ChoiceSource::tuned};
}

TuneOutcome Tuner::tune(const ProblemKey& key, Runner& runner, bool force) {
  std::lock_guard lock(tuning_mutex_);
  if (!force) {
    if (const Config* config = winners_.find(key)) {
      TuneOutcome known;
      known.winner = config->id;
      known.source = ChoiceSource::cached;
      return known;
    }
  }
  const ConfigSpace& space = space_for(key.spec.op);
  TuneOutcome outcome = tune_locally(space, key, options_.limits, settings(), runner);
  learn(key, resolve(space, key, outcome.winner));
  persist(key, outcome);
  return outcome;
}

void Tuner::learn(const ProblemKey& key, const Config* config) {
  winners_.insert(key, config);
  // Plans made while this problem had no winner (with the default: tuning not allowed for them, e.g.
  // RunOptions::no_tuning, or during capture) are made again and pick the winner up.
  detail::invalidate_plans();
}

void Tuner::persist(const ProblemKey& key, const TuneOutcome& outcome) {
  if (cache_dir_.empty()) return;
  const int64_t now = now_unix_ms();
  CacheContents additions;
  additions.device = options_.device;
  for (const auto& timing : outcome.timings) additions.timings.push_back(timing_record(key.text, timing, now));
  additions.winners.push_back({key.text, outcome.winner, outcome.default_id, now});
  const std::filesystem::path file = cache_file_path(cache_dir_, options_.device);
  const std::string error = merge_into_cache_file(file, additions);
  if (!error.empty()) {
    log_message(LogLevel::warning, "tune cache: cannot save the result for [" + key.text + "]: " + error);
  }
}

}  // namespace attnkit::tune
