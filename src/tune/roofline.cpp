#include "tune/roofline.hpp"

#include <algorithm>

namespace attnkit::tune {
namespace {

std::string over(const char* what, int64_t need, int64_t limit) {
  return std::string(what) + " " + std::to_string(need) + " > device limit " + std::to_string(limit);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string resource_violation(const ResourceNeeds& needs, const DeviceLimits& limits) {
  if (needs.smem_bytes > 0 && limits.max_smem_per_block > 0 && needs.smem_bytes > limits.max_smem_per_block) {
    return over("shared memory bytes", needs.smem_bytes, limits.max_smem_per_block);
  }
  if (needs.threads > 0 && limits.max_threads_per_block > 0 && needs.threads > limits.max_threads_per_block) {
    return over("threads", needs.threads, limits.max_threads_per_block);
  }
  if (needs.registers_per_thread > 0 && limits.max_registers_per_thread > 0 &&
      needs.registers_per_thread > limits.max_registers_per_thread) {
    return over("registers per thread", needs.registers_per_thread, limits.max_registers_per_thread);
  }
  if (needs.registers_per_thread > 0 && needs.threads > 0 && limits.registers_per_processor > 0 &&
      int64_t{needs.registers_per_thread} * needs.threads > limits.registers_per_processor) {
    return over("registers per block", int64_t{needs.registers_per_thread} * needs.threads,
                limits.registers_per_processor);
  }
  return "";
}

int32_t blocks_per_processor(const ResourceNeeds& needs, const DeviceLimits& limits) {
  int64_t fit = std::max(limits.max_blocks_per_processor, 1);
  if (needs.smem_bytes > 0 && limits.max_smem_per_processor > 0) {
    fit = std::min(fit, limits.max_smem_per_processor / needs.smem_bytes);
  }
  if (needs.threads > 0 && limits.max_threads_per_processor > 0) {
    fit = std::min<int64_t>(fit, limits.max_threads_per_processor / needs.threads);
  }
  if (needs.threads > 0 && needs.registers_per_thread > 0 && limits.registers_per_processor > 0) {
    fit = std::min(fit, limits.registers_per_processor / (int64_t{needs.threads} * needs.registers_per_thread));
  }
  return static_cast<int32_t>(std::max<int64_t>(fit, 1));
}

CostEstimate roofline_estimate(const TileWork& work, int32_t processors, int32_t occupancy,
                               const DeviceLimits& limits) {
  CostEstimate cost;
  processors = std::max(processors, 1);
  occupancy = std::max(occupancy, 1);
  const int32_t all = std::max(limits.processors, 1);
  const double flops_per_processor = limits.peak_flops / all;
  const double bytes_per_processor = limits.peak_bytes_per_second / all;
  const double alone = std::max(flops_per_processor > 0 ? work.flops_per_tile / flops_per_processor : 0.0,
                                bytes_per_processor > 0 ? work.bytes_per_tile / bytes_per_processor : 0.0);
  const int64_t concurrent = int64_t{processors} * occupancy;
  const int64_t full_waves = work.tiles / concurrent;
  const int64_t rest = work.tiles % concurrent;
  cost.tiles = work.tiles;
  cost.waves = full_waves + (rest > 0 ? 1 : 0);
  cost.seconds = limits.launch_overhead_seconds + static_cast<double>(full_waves * occupancy) * alone +
                 static_cast<double>(ceil_div(rest, processors)) * alone;
  cost.flops = work.flops_per_tile * static_cast<double>(work.tiles);
  cost.bytes = work.bytes_per_tile * static_cast<double>(work.tiles);
  return cost;
}

}  // namespace attnkit::tune
