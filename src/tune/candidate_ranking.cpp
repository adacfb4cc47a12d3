#include "tune/candidate_ranking.hpp"

#include <algorithm>

#include "tune/roofline.hpp"

namespace attnkit::tune {

CandidateRanking rank_candidates(const ConfigSpace& space, const ProblemSpec& spec, const DeviceLimits& limits) {
  CandidateRanking ranking;
  for (const auto& config : space.configs) {
    std::string reason = resource_violation(config.resources, limits);
    if (reason.empty() && space.invalid_reason) reason = space.invalid_reason(config, spec, limits);
    if (!reason.empty()) {
      ranking.rejected.push_back({&config, std::move(reason)});
      continue;
    }
    ranking.valid.push_back({&config, space.estimate(config, spec, limits)});
  }
  std::sort(ranking.valid.begin(), ranking.valid.end(), [](const RankedConfig& a, const RankedConfig& b) {
    if (a.cost.seconds != b.cost.seconds) return a.cost.seconds < b.cost.seconds;
    return a.config->id < b.config->id;
  });
  return ranking;
}

const Config* default_config(const ConfigSpace& space, const CandidateRanking& ranking, const ProblemSpec& spec,
                             const DeviceLimits& limits) {
  if (space.default_config) {
    const std::string id = space.default_config(spec, limits);
    for (const auto& ranked : ranking.valid) {
      if (ranked.config->id == id) return ranked.config;
    }
  }
  return ranking.valid.empty() ? nullptr : ranking.valid.front().config;
}

std::vector<const Config*> configs_to_time(const CandidateRanking& ranking, const Config* default_choice, int top_k,
                                           bool thorough) {
  std::vector<const Config*> chosen;
  const size_t count = thorough ? ranking.valid.size() : std::min<size_t>(ranking.valid.size(), std::max(top_k, 1));
  for (size_t i = 0; i < count; ++i) chosen.push_back(ranking.valid[i].config);
  if (default_choice != nullptr && std::find(chosen.begin(), chosen.end(), default_choice) == chosen.end()) {
    chosen.push_back(default_choice);
  }
  return chosen;
}

}  // namespace attnkit::tune
