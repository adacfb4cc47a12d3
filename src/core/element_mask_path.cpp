#include "core/element_mask_path.hpp"

#include <algorithm>
#include <cmath>

namespace attnkit::detail {
namespace {

// Seconds of the scattered path per (batch, head) beyond the shared memory traffic.
double scattered_seconds_per_head(const ElementPathProblem& p, double density, const ElementPathRates& rates) {
  const auto sq = static_cast<double>(p.seq_q);
  const auto sk = static_cast<double>(p.seq_k);
  const auto d = static_cast<double>(p.head_dim);
  const auto dv = static_cast<double>(p.head_dim_v);
  const auto bytes = static_cast<double>(p.element_bytes);
  // The chance that a key is in the union of `union_rows` rows that each attend it with probability rho.
  const double unioned = 1.0 - std::pow(1.0 - std::clamp(density, 0.0, 1.0), rates.union_rows);
  if (!p.backward) {
    const int cta_rows =
        std::max(p.head_dim, p.head_dim_v) <= 64 ? rates.forward_cta_rows_narrow : rates.forward_cta_rows_wide;
    const double flops = 2.0 * sq * sk * unioned * (d + dv);
    const double streamed = std::ceil(sq / cta_rows) * sk * (d + dv) * bytes;
    return flops / rates.gathered_flops_per_second + streamed / rates.l2_bytes_per_second;
  }
  const double flops = 2.0 * sq * sk * unioned * ((2 * d + dv) + (2 * d + 2 * dv));
  const double streamed = std::ceil(sq / rates.backward_cta_rows) * sk * (d + dv) * bytes +
                          std::ceil(sk / rates.backward_cta_rows) * sq * ((d + dv) * bytes + 8.0);
  return flops / rates.gathered_flops_per_second_backward + streamed / rates.l2_bytes_per_second;
}

}  // namespace

ElementPathCosts element_path_costs(const ElementPathProblem& problem, const ElementMaskStats& stats,
                                    const ElementPathRates& rates) {
  const auto d = static_cast<double>(problem.head_dim + problem.head_dim_v);
  const double heads = static_cast<double>(problem.batch) * static_cast<double>(problem.heads_q);
  const double slices = stats.slices > 0 ? static_cast<double>(stats.slices) : 1.0;
  // A broadcast mask slice serves every (batch, head) it is broadcast over.
  const double per_slice = heads / slices;
  const double entries = slices * static_cast<double>(problem.seq_q) * static_cast<double>(problem.seq_k);
  const double density = entries > 0 ? static_cast<double>(stats.true_entries) / entries : 0.0;
  const double direction = problem.backward ? 2.5 : 1.0;
  // Shared by both paths: the byte mask read once per call (classified or packed), Q, K, V, O streamed.
  const double io_bytes = heads * static_cast<double>(problem.seq_q + problem.seq_k) * d *
                          static_cast<double>(problem.element_bytes) * direction;
  const double memory_seconds = (entries + io_bytes) / rates.memory_bytes_per_second;

  const double tile_flops = 2.0 * problem.block_m * problem.block_n * d;
  const auto partial = static_cast<double>(stats.nonempty_tiles - stats.full_tiles);
  const double partial_factor = problem.backward ? rates.partial_tile_factor_backward : rates.partial_tile_factor;
  const double weighted_tiles = static_cast<double>(stats.full_tiles) + partial * partial_factor;
  ElementPathCosts costs;
  const bool narrow = std::max(problem.head_dim, problem.head_dim_v) <= 64;
  const double tile_rate =
      problem.backward ? (narrow ? rates.tile_flops_per_second_backward : rates.tile_flops_per_second_backward_wide)
                       : (narrow ? rates.tile_flops_per_second : rates.tile_flops_per_second_wide);
  costs.tiles_seconds = per_slice * weighted_tiles * tile_flops * direction / tile_rate + memory_seconds;
  costs.scattered_seconds = heads * scattered_seconds_per_head(problem, density, rates) + memory_seconds;
  return costs;
}

ElementMaskPath choose_element_path(const ElementPathProblem& problem, const ElementMaskStats& stats,
                                    const ElementPathRates& rates) {
  const ElementPathCosts costs = element_path_costs(problem, stats, rates);
  return costs.scattered_seconds < costs.tiles_seconds ? ElementMaskPath::scattered : ElementMaskPath::tiles;
}

}  // namespace attnkit::detail
