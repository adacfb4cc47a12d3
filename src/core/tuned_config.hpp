// The public description of a plan's kernel choice (attnkit::TunedConfig): the config's name and where
// the choice came from, in the public spelling ("default", "cache", "tuned").
#pragma once
#include <string>

#include "attnkit/tuner.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::detail {

inline TunedConfig tuned_config(std::string name, tune::ChoiceSource source) {
  switch (source) {
    case tune::ChoiceSource::cached: return {std::move(name), "cache"};
    case tune::ChoiceSource::tuned: return {std::move(name), "tuned"};
    case tune::ChoiceSource::default_config: break;
  }
  return {std::move(name), "default"};
}

}  // namespace attnkit::detail
