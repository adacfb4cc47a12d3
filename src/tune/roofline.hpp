// The roofline part of the analytical cost model (DESIGN §6.3), shared by every kernel's estimate:
// how many blocks fit on a processor at once, and how long `tiles` equal blocks take in waves.
//
// A block alone runs for t = max(flops / per-processor FLOP/s, bytes / per-processor bandwidth).
// Blocks are launched in waves of processors * occupancy; in a full wave `occupancy` blocks share a
// processor, so the wave takes occupancy * t; the tail wave puts ceil(rest / processors) blocks on
// the busiest processor. That charges the idle part of a partial wave (wave quantisation) and ignores
// latency hiding, which measurement settles.
#pragma once
#include <cstdint>
#include <string>

#include "tune/config_space.hpp"
#include "tune/device_limits.hpp"

namespace attnkit::tune {

struct TileWork {
  int64_t tiles = 0;            // blocks launched
  double flops_per_tile = 0.0;  // average, including padded and masked-out work
  double bytes_per_tile = 0.0;
};

// "" when `needs` fit one block's limits, else which limit fails, e.g.
// "shared memory 232448 bytes > device limit 232448".
std::string resource_violation(const ResourceNeeds& needs, const DeviceLimits& limits);

// Blocks resident per processor (>= 1 when the needs fit a block).
int32_t blocks_per_processor(const ResourceNeeds& needs, const DeviceLimits& limits);

// `processors` can be less than limits.processors (a CPU config that uses fewer threads).
CostEstimate roofline_estimate(const TileWork& work, int32_t processors, int32_t occupancy, const DeviceLimits& limits);

}  // namespace attnkit::tune
