// KV-parallel splitting of the backward's dK/dV kernel: the automatic choice (fmha_backward_split.hpp).
#include "cuda/fmha/fmha_backward_split.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnkit/attention.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range_inverse.hpp"

namespace attnkit::cuda::fmha {

double kv_split_time(const KvSplitInputs& in, int32_t splits) {
  const int64_t slots = std::max<int64_t>(in.slots, 1);
  const double waves = static_cast<double>((in.ctas * splits + slots - 1) / slots);
  const double per_split = std::ceil(in.visits / splits);
  return waves * (per_split + (splits > 1 ? kSplitOverheadVisits : 0.0));
}

int32_t choose_kv_splits(const KvSplitInputs& in) {
  if (in.requested > 0) return std::min(in.requested, kMaxBackwardKvSplits);
  const int64_t limit = in.workspace_limit < 0 ? kDefaultSplitWorkspaceBytes : in.workspace_limit;
  if (limit == 0 || in.ctas <= 0) return 1;
  const int32_t most =
      static_cast<int32_t>(std::min<double>(kMaxBackwardKvSplits, std::floor(in.visits / kMinVisitsPerSplit)));
  int32_t best = 1;
  double best_time = kv_split_time(in, 1);
  const double unsplit = best_time;
  for (int32_t s = 2; s <= most; ++s) {
    if (in.partial_bytes > 0 && s > limit / in.partial_bytes) break;
    const double t = kv_split_time(in, s);
    if (t < best_time) {
      best = s;
      best_time = t;
    }
  }
  return best_time <= (1.0 - kSplitMinimumGain) * unsplit ? best : 1;
}

namespace {

// Indices of dimension d in dilation group 0 of a side.
int64_t group0_indices(const TokenSpace& space, int d, int32_t dilation) {
  if (space.decompose) return d == 0 ? space.flat_extent : 1;
  return detail::dilation_group_size(space.extent[d], dilation, 0);
}

// Average number of Q tiles (per dimension) that a KV tile visits (KvBoxSchedule's, at p.q_tile_origins),
// sampled at up to kSamples positions.
double average_q_span(const FmhaBackwardParams& p, int d) {
  constexpr int64_t kSamples = 8;
  const int64_t n_q = group0_indices(p.q_space, d, p.dilation[d]);
  const int64_t n_kv = group0_indices(p.kv_space, d, p.dilation[d]);
  const int64_t kv_box = int64_t{1} << p.kv_space.box_log2[d];
  const int64_t tiles = std::max<int64_t>(p.kv_tiles[d], 1);
  const int64_t samples = std::min(tiles, kSamples);
  double sum = 0;
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t tile = samples == 1 ? 0 : i * (tiles - 1) / (samples - 1);
    const DimKeyTiles r =
        dim_query_tiles(p.rule[d], tile * kv_box, kv_box, n_q, n_kv, p.q_space.box_log2[d], p.q_tile_origins);
    sum += static_cast<double>(r.count);
  }
  return sum / static_cast<double>(samples);
}

}  // namespace

double backward_visits_per_kv_tile(const FmhaBackwardParams& p, FmhaBackwardPolicy policy) {
  double per_head = 1;
  if (policy == FmhaBackwardPolicy::tile_list) {
    per_head = p.q_tiles[0];
  } else {
    for (int d = 0; d < p.dims; ++d) per_head *= average_q_span(p, d);
  }
  return per_head * p.heads_per_kv;
}

std::vector<double> kv_position_work(const FmhaBackwardParams& p) {
  int64_t positions = 1;
  for (int d = 0; d < kMaxDims; ++d) positions *= p.kv_tiles[d];
  std::vector<double> visits(static_cast<size_t>(positions), 1.0);
  std::vector<double> full(visits);
  int64_t inner = positions;  // positions per step of dimension d (last dimension fastest)
  for (int d = 0; d < kMaxDims; ++d) {
    inner /= p.kv_tiles[d];
    if (d >= p.dims) continue;
    const int64_t n_q = group0_indices(p.q_space, d, p.dilation[d]);
    const int64_t n_kv = group0_indices(p.kv_space, d, p.dilation[d]);
    const int64_t kv_box = int64_t{1} << p.kv_space.box_log2[d];
    std::vector<DimKeyTiles> ranges(static_cast<size_t>(p.kv_tiles[d]));
    for (int64_t t = 0; t < p.kv_tiles[d]; ++t) {
      ranges[static_cast<size_t>(t)] =
          dim_query_tiles(p.rule[d], t * kv_box, kv_box, n_q, n_kv, p.q_space.box_log2[d], p.q_tile_origins);
    }
    for (int64_t i = 0; i < positions; ++i) {
      const DimKeyTiles& r = ranges[static_cast<size_t>((i / inner) % p.kv_tiles[d])];
      visits[static_cast<size_t>(i)] *= static_cast<double>(r.count);
      full[static_cast<size_t>(i)] *= static_cast<double>(r.full_end - r.full_first);
    }
  }
  for (size_t i = 0; i < visits.size(); ++i) visits[i] += kPartialVisitExtra * (visits[i] - full[i]);
  return visits;
}

void order_kv_tiles_heaviest_first(FmhaBackwardParams& p, FmhaBackwardPolicy policy, int64_t slots) {
  p.kv_order.positions = 0;
  p.kv_order.groups = 1;
  p.kv_order.first_head = 0;
  int64_t positions = 1;
  for (int d = 0; d < kMaxDims; ++d) positions *= p.kv_tiles[d];
  if (policy == FmhaBackwardPolicy::tile_list || positions > kMaxOrderedKvPositions || positions < 2) return;
  const std::vector<double> work = kv_position_work(p);
  std::vector<int32_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return work[static_cast<size_t>(a)] > work[static_cast<size_t>(b)]; });
  if (std::is_sorted(order.begin(), order.end())) return;  // already heaviest first (dense, causal)
  p.kv_order.positions = static_cast<int32_t>(positions);
  p.kv_order.groups = static_cast<int32_t>(p.total_kv_tiles / positions);
  const int64_t per_head = int64_t{p.total_kv_tiles} * p.kv_splits;
  const int64_t ctas = per_head * p.heads_kv * p.batch;
  p.kv_order.first_head = static_cast<int32_t>(std::max<int64_t>(ctas - std::max<int64_t>(slots, 1), 0) / per_head);
  for (size_t i = 0; i < order.size(); ++i) p.kv_order.position[i] = static_cast<uint16_t>(order[i]);
}

int64_t kv_split_partial_bytes(const FmhaBackwardParams& p, int block_n, int width) {
  return 2 * int64_t{p.batch} * p.heads_kv * p.total_kv_tiles * block_n * width * int64_t{sizeof(float)};
}

}  // namespace attnkit::cuda::fmha
