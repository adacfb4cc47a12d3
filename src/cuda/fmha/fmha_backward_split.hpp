// KV-parallel splitting of the backward's dK/dV kernel (AttentionBackward::kv_splits,
// split_workspace_limit): with S > 1 splits, KV tile t runs on S CTAs (blockIdx.x = r * S + s, r the tile's rank in the
// launch order), split s visiting a contiguous part of the tile's Q-tile visits (count / S of them, one more for the
// first count % S splits; split_visit_range in fmha_backward_split.cuh). Each writes its unscaled fp32 dK and dV (all
// BlockN rows, compiled-width columns) to its own slab of the workspace; fmha_backward_dkdv_reduce_kernel sums the S
// slabs of a tile in split order, scales dK and writes both gradients. No atomics: the result is the same from run to
// run in both modes.
//
// The automatic choice (kv_splits == 0) is a pure function of the problem and the device: a wave model
// of the dK/dV kernel in units of one visit, time(S) = ceil(ctas * S / slots) * (ceil(visits / S) +
// overhead), where ctas is the unsplit grid, slots the CTAs the device runs at once, visits the average
// Q-tile visits of a KV tile (all query heads of its group; estimated from the window rule at a few tile
// positions per dimension) and overhead the cost of writing and re-reading the fp32 partials (kSplitOverheadVisits).
// It takes the S with the least time if that saves at least kSplitMinimumGain, with at least
// kMinVisitsPerSplit visits per split and S * partial bytes within the workspace limit.
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"

namespace attnkit::cuda::fmha {

inline constexpr double kSplitOverheadVisits = 2.0;
inline constexpr double kSplitMinimumGain = 0.15;
inline constexpr int32_t kMinVisitsPerSplit = 2;

struct KvSplitInputs {
  int64_t ctas = 0;              // CTAs of the unsplit dK/dV grid
  double visits = 0;             // average visits per CTA
  int64_t slots = 1;             // CTAs resident at once (SMs x CTAs per SM)
  int64_t partial_bytes = 0;     // workspace of one split's partials (dK and dV of every KV tile)
  int32_t requested = 0;         // AttentionBackward::kv_splits
  int64_t workspace_limit = -1;  // AttentionBackward::split_workspace_limit
};

// The number of splits (>= 1).
int32_t choose_kv_splits(const KvSplitInputs& in);

// Modelled dK/dV time of `splits` splits, in visits (choose_kv_splits' objective).
double kv_split_time(const KvSplitInputs& in, int32_t splits);

// Average Q-tile visits of a KV tile over all query heads of its group, from the window rules of `p`
// (box policies) or the number of Q tiles (tile lists: the mask's density is unknown on the host).
double backward_visits_per_kv_tile(const FmhaBackwardParams& p, FmhaBackwardPolicy policy);

// Launch order of the dK/dV grid (box policies): in the (batch, KV head) pairs that have a CTA among the
// grid's last `slots` (one wave), KV tiles of more modelled work launch first, so that the SMs finish
// together (a greedy schedule of the longest tasks first); the earlier pairs keep the tiles' own order,
// whose neighbouring tiles share Q tiles in L2 (ordering every pair cost the 16x64x64 na3d backward 5%
// on an H100, docs/perf.md). A tile's work is modelled per box position of dilation group 0 as visits +
// kPartialVisitExtra * partial visits, products over the dimensions of the Q-tile ranges meeting it
// (dim_tile_range_inverse), all groups alike. Sets p.kv_order (positions = 0, the tiles' own order, when
// that is already heaviest first, for tile lists, or for more than kMaxOrderedKvPositions positions).
// Needs the tiles, rules, spaces, dilations, heads, batch and kv_splits of `p`.
inline constexpr double kPartialVisitExtra = 0.25;
void order_kv_tiles_heaviest_first(FmhaBackwardParams& p, FmhaBackwardPolicy policy, int64_t slots);

// The modelled work of each box position of dilation group 0, position-linear (last dimension fastest).
std::vector<double> kv_position_work(const FmhaBackwardParams& p);

// Bytes of one split's fp32 partials: dK and dV, BlockN rows of `width` columns per KV tile and head.
int64_t kv_split_partial_bytes(const FmhaBackwardParams& p, int block_n, int width);

}  // namespace attnkit::cuda::fmha
