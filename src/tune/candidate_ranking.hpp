// Pruning before measurement (DESIGN §6.3): drop the configs that cannot run (device resource
// filters, then the space's own validity check), rank the rest by the analytical cost estimate, and
// pick which ones to time — the top K, or all of them in thorough mode, always with the default.
// Ties in predicted cost are broken by config id so that every rank and every run orders alike.
#pragma once
#include <string>
#include <vector>

#include "tune/config_space.hpp"

namespace attnkit::tune {

struct RankedConfig {
  const Config* config = nullptr;
  CostEstimate cost;
};

struct RejectedConfig {
  const Config* config = nullptr;
  std::string reason;
};

struct CandidateRanking {
  std::vector<RankedConfig> valid;  // cheapest predicted first
  std::vector<RejectedConfig> rejected;
};

CandidateRanking rank_candidates(const ConfigSpace& space, const ProblemSpec& spec, const DeviceLimits& limits);

// The config used without tuning: the space's default_config when it names a valid config, else
// the cheapest predicted one. nullptr only when no config is valid. A pure function of its inputs.
const Config* default_config(const ConfigSpace& space, const CandidateRanking& ranking, const ProblemSpec& spec,
                             const DeviceLimits& limits);

// The configs to time, cheapest predicted first: the top `top_k` (all when `thorough`), plus the
// default when it is not among them: the winner rule compares every candidate with the default timed
// in the same rounds, so the default is always timed.
std::vector<const Config*> configs_to_time(const CandidateRanking& ranking, const Config* default_choice, int top_k,
                                           bool thorough);

}  // namespace attnkit::tune
