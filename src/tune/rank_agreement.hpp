// Making every rank of a job pick the same config (DESIGN §6.7). Ranks that pick different configs
// can run different numbers of kernels or collectives and deadlock a job, so a grouped tuner never
// decides alone; both strategies start with the root's broadcast, and every rank executes exactly
// the same collectives whatever happens locally (failures become "failed" timings, not exceptions).
//
//  root_tunes:    the root uses its cached winner, or times the candidates itself, or takes the
//                 default, and broadcasts the choice. Other ranks never benchmark.
//  split_configs: the root broadcasts the plan (cached winner, or the candidate list); when tuning,
//                 rank r times candidates r, r + size, ... interleaved with the default, which every
//                 rank times: GPUs differ, so a candidate is only ever compared with the default
//                 timed on its own GPU in the same rounds. The timings are all-gathered and every
//                 rank applies the same winner rule to the same numbers (the best ratio to its own
//                 rank's default, ties by config id), so all reach the same winner while each spends
//                 about 1/size of the time. The outcome keeps the default's timing of the rank that
//                 decided, so the root's cache holds one GPU's evidence.
// Either way a config other than the default is only chosen by a timed comparison with it.
#pragma once
#include <string_view>

#include "tune/device_limits.hpp"
#include "tune/local_tuning.hpp"
#include "tune/rank_group.hpp"

namespace attnkit::tune {

enum class AgreementStrategy { root_tunes, split_configs };

std::string_view strategy_name(AgreementStrategy strategy);  // "root_tunes", "split_configs"

constexpr int kRootRank = 0;

struct AgreementInputs {
  const ConfigSpace* space = nullptr;
  const ProblemKey* key = nullptr;
  const DeviceLimits* limits = nullptr;
  const TunerSettings* settings = nullptr;
  const Config* cached_winner = nullptr;  // this rank's cached winner (only the root's is used)
  bool may_benchmark = false;             // this rank's view (only the root's is used)
  Runner* runner = nullptr;               // this rank's runner; may be null
};

// Collective: every rank of `group` calls it for the same key. Returns the same outcome on every rank
// (timings: the root's for root_tunes, everyone's for split_configs).
TuneOutcome agree_on_config(RankGroup& group, AgreementStrategy strategy, const AgreementInputs& inputs);

}  // namespace attnkit::tune
