// The bytes ranks exchange to agree on a config (JSON text, so a mismatched peer fails loudly).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tune/local_tuning.hpp"

namespace attnkit::tune {

// What the root tells the others before any timing.
struct RootDecision {
  std::string winner;  // set when !tune
  ChoiceSource source = ChoiceSource::default_config;
  bool tune = false;  // split strategy: every rank times its share of `candidates`
  std::string default_id;
  std::vector<std::string> candidates;
  double margin = 0.0;
  std::vector<ConfigTiming> timings;  // root strategy: what the root measured, for the others' logs
};

std::string encode_decision(const RootDecision& decision);
// Throws Error(internal) on bytes that are not an encoded decision.
RootDecision decode_decision(std::string_view bytes);

std::string encode_timings(const std::vector<ConfigTiming>& timings);
std::vector<ConfigTiming> decode_timings(std::string_view bytes);

// Indices of the candidates rank `rank` of `size` times: i % size == rank.
std::vector<size_t> share_of_candidates(size_t candidates, int rank, int size);

}  // namespace attnkit::tune
