// The caller's collectives (attnkit::RankCollectives: std::functions, filled by the C ABI from C
// callbacks or by C++ callers directly) as the tuner's RankGroup.
#pragma once
#include <memory>

#include "attnkit/tuner.hpp"
#include "tune/rank_group.hpp"

namespace attnkit::tune {

// Throws Error(internal) from all_gather when the callback returns other than one result per rank.
std::shared_ptr<RankGroup> rank_group_from_collectives(RankCollectives collectives);

}  // namespace attnkit::tune
