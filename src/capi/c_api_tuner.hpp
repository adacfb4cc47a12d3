// The C ABI's rank group (C callbacks and a context pointer) as the C++ API's RankCollectives; shared
// with tests, which drive it with threads pretending to be ranks.
#pragma once
#include "attnkit/attnkit.h"
#include "attnkit/tuner.hpp"

namespace attnkit::capi {

// Throws Error(invalid_argument) for an unknown agreement or missing callbacks when size > 1. The
// callbacks must stay valid while the result is in use.
RankCollectives to_collectives(const attnkit_rank_group& group);

}  // namespace attnkit::capi
