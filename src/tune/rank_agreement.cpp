#include "tune/rank_agreement.hpp"

#include <exception>

#include "core/log.hpp"
#include "tune/agreement_messages.hpp"

namespace attnkit::tune {
namespace {

using detail::log_message;
using detail::LogLevel;

// The root's choice before anything is timed. Never throws: whatever goes wrong becomes the
// default (or "" when even that cannot be computed), so the broadcast that follows always happens.
RootDecision root_plan(const AgreementInputs& in, AgreementStrategy strategy) {
  RootDecision d;
  d.margin = in.settings->margin;
  try {
    if (in.cached_winner != nullptr) {
      d.winner = in.cached_winner->id;
      d.source = ChoiceSource::cached;
      return d;
    }
    const TuningPlan plan = plan_tuning(*in.space, *in.key, *in.limits, *in.settings);
    d.default_id = plan.default_id;
    d.winner = plan.default_id;
    if (!in.may_benchmark) return d;
    if (strategy == AgreementStrategy::root_tunes) {
      d.timings = time_candidates(plan.candidates, *in.key, *in.settings, *in.runner);
      d.winner = decide_winner(*in.key, d.timings, plan.default_id, d.margin);
      d.source = ChoiceSource::tuned;
    } else {
      d.tune = true;
      for (const Config* config : plan.candidates) d.candidates.push_back(config->id);
    }
  } catch (const std::exception& e) {
    log_message(LogLevel::warning, std::string("tuner: the root could not plan [") + in.key->text + "]: " + e.what());
    d.tune = false;
    d.source = ChoiceSource::default_config;
  }
  return d;
}

// This rank's share of the candidates, timed interleaved with the default: every rank times the
// default too, so each candidate is compared with the default on its own GPU, in the same rounds.
std::vector<ConfigTiming> time_my_share(const RootDecision& plan, const AgreementInputs& in, int rank, int size) {
  std::vector<std::string> ids{plan.default_id};
  for (const size_t i : share_of_candidates(plan.candidates.size(), rank, size)) {
    if (plan.candidates[i] != plan.default_id) ids.push_back(plan.candidates[i]);
  }
  if (ids.size() == 1) return {};  // nothing to compare with the default here (fewer candidates than ranks)
  std::vector<const Config*> mine;
  std::vector<ConfigTiming> timings;
  for (const std::string& id : ids) {
    const Config* config = in.space->find(id);
    if (config == nullptr || in.runner == nullptr) {
      ConfigTiming failed;
      failed.config_id = id;
      failed.error = config == nullptr ? "not a config of this build (rank " + std::to_string(rank) + ")"
                                       : "rank " + std::to_string(rank) + " has no runner";
      timings.push_back(std::move(failed));
      continue;
    }
    mine.push_back(config);
  }
  std::vector<ConfigTiming> measured = time_candidates(mine, *in.key, *in.settings, *in.runner);
  timings.insert(timings.end(), measured.begin(), measured.end());
  return timings;
}

// The timings the outcome keeps (and the root writes to its cache): every rank's candidates, and the
// default once, from the rank whose comparison decided, so the cache's evidence is one GPU's.
std::vector<ConfigTiming> evidence_timings(const std::vector<std::vector<ConfigTiming>>& parts,
                                           const WinnerChoice& choice, const std::string& default_id) {
  std::vector<ConfigTiming> timings;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const auto& t : parts[p]) {
      if (t.config_id != default_id || p == choice.part) timings.push_back(t);
    }
  }
  return timings;
}

}  // namespace

std::string_view strategy_name(AgreementStrategy strategy) {
  return strategy == AgreementStrategy::root_tunes ? "root_tunes" : "split_configs";
}

TuneOutcome agree_on_config(RankGroup& group, AgreementStrategy strategy, const AgreementInputs& in) {
  const int rank = group.rank();
  std::string bytes;
  if (rank == kRootRank) bytes = encode_decision(root_plan(in, strategy));
  group.broadcast(bytes, kRootRank);
  const RootDecision plan = decode_decision(bytes);

  TuneOutcome outcome;
  outcome.default_id = plan.default_id;
  outcome.winner = plan.winner;
  outcome.source = plan.source;
  outcome.timings = plan.timings;
  if (!plan.tune) return outcome;

  const std::vector<std::string> gathered =
      group.all_gather(encode_timings(time_my_share(plan, in, rank, group.size())));
  std::vector<std::vector<ConfigTiming>> parts;
  for (const auto& part : gathered) parts.push_back(decode_timings(part));
  const WinnerChoice choice = decide_winner(*in.key, parts, plan.default_id, plan.margin);
  outcome.winner = choice.id;
  outcome.timings = evidence_timings(parts, choice, plan.default_id);
  outcome.source = ChoiceSource::tuned;
  return outcome;
}

}  // namespace attnkit::tune
