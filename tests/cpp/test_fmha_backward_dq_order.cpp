// The order of the ordered dQ additions (the Hopper backward's deterministic mode,
// src/cuda/fmha/fmha_backward_dq_order.hpp), checked on the CPU against the dK/dV kernel's visit schedules
// (dim_tile_range_inverse per dimension, walked first dimension fastest): on random 1-, 2- and 3-D problems
// (neighborhoods with kernel size, stride, causal and dilation groups; flat dense and causal masks with
// Sq != Sk) and random power-of-two boxes,
//   - the ranks of the KV tiles that visit a Q tile are exactly 0 .. visitors - 1 (every turn is taken once),
//   - a lower rank always belongs to a KV tile launched earlier (descending_launch_tile), and
//   - a simulation of the grid on a few CTA slots (CTAs started in launch order, KV tiles split over
//     several CTAs, each CTA's producer stages and two MMA warpgroups taking, holding and passing their
//     turns as the kernel does, warpgroups skipping visits) never deadlocks and takes every turn once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/common/tile_range_inverse.hpp"
#include "cuda/fmha/fmha_backward_dq_order.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"

namespace attnkit::cuda::fmha {
namespace {

using Position = std::vector<int32_t>;  // one entry per dimension

// A random problem of `dims` token dimensions as the dK/dV kernel sees it: rules, boxes and tile counts.
struct OrderProblem {
  FmhaBackwardParams p;
  int32_t extent_q[kMaxDims] = {1, 1, 1};
  int32_t extent_kv[kMaxDims] = {1, 1, 1};
  std::string text;
};

OrderProblem random_problem(std::mt19937_64& rng, int dims, bool flat) {
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  OrderProblem o;
  FmhaBackwardParams& p = o.p;
  p.dims = dims;
  for (int d = 0; d < dims; ++d) {
    WindowRule& rule = p.rule[d];
    int32_t dilation = 1;
    if (flat) {
      o.extent_q[d] = static_cast<int32_t>(uniform(1, 300));
      o.extent_kv[d] = static_cast<int32_t>(uniform(1, 300));
      if (uniform(0, 1) == 1) {
        rule.kind = WindowKind::prefix;
        rule.prefix_offset = uniform(0, 1) == 1 ? o.extent_kv[d] - o.extent_q[d] : 0;  // bottom-right, top-left
      }
    } else {
      o.extent_q[d] = o.extent_kv[d] = static_cast<int32_t>(uniform(2, dims == 1 ? 160 : 32));
      dilation = static_cast<int32_t>(uniform(1, 3));
      const int64_t group_size = detail::dilation_group_size(o.extent_q[d], dilation, dilation - 1);
      if (group_size < 1) dilation = 1;
      rule.kind = WindowKind::neighborhood;
      rule.window =
          static_cast<int32_t>(uniform(1, detail::dilation_group_size(o.extent_q[d], dilation, dilation - 1)));
      rule.stride = static_cast<int32_t>(uniform(1, rule.window));
      rule.causal = uniform(0, 1) == 1;
    }
    p.dilation[d] = dilation;
    p.q_space.box_log2[d] = static_cast<int32_t>(uniform(0, dims == 1 ? 6 : 3));
    p.kv_space.box_log2[d] = static_cast<int32_t>(uniform(0, dims == 1 ? 7 : 3));
    const int64_t q_group0 = detail::dilation_group_size(o.extent_q[d], dilation, 0);
    const int64_t kv_group0 = detail::dilation_group_size(o.extent_kv[d], dilation, 0);
    p.q_tiles[d] =
        static_cast<int32_t>((q_group0 + (int64_t{1} << p.q_space.box_log2[d]) - 1) >> p.q_space.box_log2[d]);
    p.kv_tiles[d] =
        static_cast<int32_t>((kv_group0 + (int64_t{1} << p.kv_space.box_log2[d]) - 1) >> p.kv_space.box_log2[d]);
    o.text += " [L " + std::to_string(o.extent_q[d]) + "/" + std::to_string(o.extent_kv[d]) + " kind " +
              std::to_string(static_cast<int>(rule.kind)) + " w " + std::to_string(rule.window) + " s " +
              std::to_string(rule.stride) + " c " + std::to_string(rule.causal) + " off " +
              std::to_string(rule.prefix_offset) + " d " + std::to_string(dilation) + " boxes " +
              std::to_string(1 << p.q_space.box_log2[d]) + "/" + std::to_string(1 << p.kv_space.box_log2[d]) + "]";
  }
  return o;
}

// One dilation group's tiles, visits and ranks, as the kernel computes them.
struct GroupSchedule {
  int32_t n_q[kMaxDims] = {1, 1, 1};
  int32_t n_kv[kMaxDims] = {1, 1, 1};
  std::vector<Position> kv_tiles;                    // valid KV tiles of the group, in launch order
  std::vector<std::vector<Position>> visits;         // per KV tile: its Q tiles, first dimension fastest
  std::vector<std::vector<uint32_t>> ranks;          // per KV tile and visit: box_visit_rank
  std::map<Position, std::vector<size_t>> visitors;  // per Q tile: the KV tiles (launch index) visiting it
};

GroupSchedule schedule_group(const OrderProblem& o, const int32_t (&group)[kMaxDims]) {
  const FmhaBackwardParams& p = o.p;
  GroupSchedule g;
  for (int d = 0; d < p.dims; ++d) {
    g.n_q[d] = static_cast<int32_t>(detail::dilation_group_size(o.extent_q[d], p.dilation[d], group[d]));
    g.n_kv[d] = static_cast<int32_t>(detail::dilation_group_size(o.extent_kv[d], p.dilation[d], group[d]));
  }
  const int32_t positions = p.kv_tiles[0] * p.kv_tiles[1] * p.kv_tiles[2];
  for (int32_t x = 0; x < positions; ++x) {
    int32_t position[kMaxDims];
    descending_launch_position(x, p.kv_tiles, position);
    bool valid = true;
    for (int d = 0; d < kMaxDims; ++d) valid = valid && (position[d] << p.kv_space.box_log2[d]) < g.n_kv[d];
    if (!valid) continue;  // past the end of a smaller dilation group: the kernel's CTA returns at once
    // The schedule: per dimension the Q tiles meeting the KV tile, walked first dimension fastest.
    int32_t first[kMaxDims] = {0, 0, 0};
    int32_t span[kMaxDims] = {1, 1, 1};
    for (int d = 0; d < p.dims; ++d) {
      const int64_t kv_box = int64_t{1} << p.kv_space.box_log2[d];
      const DimTileRange r = dim_tile_range_inverse(p.rule[d], position[d] * kv_box, kv_box, g.n_q[d], g.n_kv[d],
                                                    int64_t{1} << p.q_space.box_log2[d]);
      first[d] = static_cast<int32_t>(r.first);
      span[d] = static_cast<int32_t>(std::max<int64_t>(r.end - r.first, 0));
    }
    const size_t launch = g.kv_tiles.size();
    g.kv_tiles.emplace_back(position, position + kMaxDims);
    g.visits.emplace_back();
    g.ranks.emplace_back();
    const int32_t count = span[0] * span[1] * span[2];
    for (int32_t i = 0; i < count; ++i) {
      int32_t t = i;
      int32_t q_first[kMaxDims];
      Position q(kMaxDims);
      for (int d = 0; d < kMaxDims; ++d) {
        q[d] = first[d] + t % span[d];
        t /= span[d];
        q_first[d] = q[d] << p.q_space.box_log2[d];
      }
      g.visits.back().push_back(q);
      g.ranks.back().push_back(box_visit_rank(p, q_first, g.n_q, g.n_kv, position));
      g.visitors[q].push_back(launch);
    }
  }
  return g;
}

// Runs the grid on `slots` CTA slots as the dK/dV kernel runs it: each KV tile's visits split over `splits`
// CTAs (contiguous parts, the first ones one visit longer), CTAs started in launch order as slots free up.
// In a CTA of `groups` MMA warpgroups (1 or 2) a producer fills two stages (visit i once every MMA warpgroup
// released visit i - 2); MMA warpgroup k, on visit i, passes on the turn it still holds (its previous reductions
// completed), hands the stage back and waits until the Q tile's counter reaches its turn (warpgroup_turn); then, if it
// adds nothing (adds(tile, visit, k) false: its half of a partial box visit meets no window), it passes the turn on at
// once, else it holds it until its next visit (the reductions in flight) or its end. Returns false on a deadlock
// (resident CTAs that all wait) or when a Q tile's turns are not all taken exactly once.
template <class Adds>
bool simulate(const GroupSchedule& g, int slots, int splits, int groups, const Adds& adds) {
  struct Group {
    size_t next = 0;                 // visit, within the CTA's part
    bool waiting = false;            // for its turn on visit `next`
    const Position* held = nullptr;  // the Q tile whose turn it holds while its reductions complete
  };
  struct Cta {
    size_t tile, first, count;
    Group group[2];
  };
  std::vector<Cta> ctas;
  for (size_t t = 0; t < g.kv_tiles.size(); ++t) {
    const size_t total = g.visits[t].size();
    size_t at = 0;
    for (int s = 0; s < splits; ++s) {
      const size_t part = total / splits + (static_cast<size_t>(s) < total % splits ? 1 : 0);
      ctas.push_back(Cta{t, at, part, {}});
      at += part;
    }
  }
  std::map<Position, uint32_t> counter;
  auto pass_held = [&](Group& w) {
    if (w.held != nullptr) ++counter[*w.held];
    w.held = nullptr;
  };
  // One step of warpgroup `k` of CTA `c`; false when it waits or has nothing left to do.
  auto step = [&](Cta& c, int k) {
    Group& w = c.group[k];
    if (w.next == c.count) {
      if (w.held == nullptr) return false;
      pass_held(w);
      return true;
    }
    const size_t i = c.first + w.next;
    const Position& q = g.visits[c.tile][i];
    if (!w.waiting) {
      size_t released = c.group[0].next;  // visits every warpgroup handed back
      for (int other = 1; other < groups; ++other) released = std::min(released, c.group[other].next);
      if (w.next >= 2 && released + 2 <= w.next) return false;  // the producer has not filled it
      pass_held(w);
      w.waiting = true;
      return true;
    }
    if (counter[q] != warpgroup_turn(g.ranks[c.tile][i], k, groups)) return false;
    if (adds(c.tile, i, k)) {
      w.held = &q;
    } else {
      ++counter[q];
    }
    w.waiting = false;
    ++w.next;
    return true;
  };
  std::vector<size_t> resident;
  size_t launched = 0;
  while (launched < ctas.size() || !resident.empty()) {
    while (resident.size() < static_cast<size_t>(slots) && launched < ctas.size()) resident.push_back(launched++);
    bool progress = false;
    for (const size_t r : resident) {
      for (int k = 0; k < groups; ++k) {
        while (step(ctas[r], k)) progress = true;
      }
    }
    auto finished = [&](size_t r) {
      const Cta& c = ctas[r];
      for (int k = 0; k < groups; ++k) {
        if (c.group[k].next != c.count || c.group[k].held != nullptr) return false;
      }
      return true;
    };
    const auto done = std::remove_if(resident.begin(), resident.end(), finished);
    progress = progress || done != resident.end();
    resident.erase(done, resident.end());
    if (!progress) return false;
  }
  for (const auto& [q, turns] : counter) {
    if (turns != static_cast<size_t>(groups) * g.visitors.at(q).size())
      return false;  // every turn of every visitor, once each
  }
  return true;
}

void check_problem(const OrderProblem& o) {
  const FmhaBackwardParams& p = o.p;
  int32_t group[kMaxDims] = {0, 0, 0};
  for (group[0] = 0; group[0] < p.dilation[0]; ++group[0]) {
    for (group[1] = 0; group[1] < p.dilation[1]; ++group[1]) {
      for (group[2] = 0; group[2] < p.dilation[2]; ++group[2]) {
        const GroupSchedule g = schedule_group(o, group);
        for (const auto& [q, visitors] : g.visitors) {
          // Ranks of the visitors, in launch order: exactly 0, 1, 2, ...
          std::vector<uint32_t> ranks;
          for (const size_t launch : visitors) {
            const auto& visits = g.visits[launch];
            const size_t i = static_cast<size_t>(std::find(visits.begin(), visits.end(), q) - visits.begin());
            ranks.push_back(g.ranks[launch][i]);
          }
          std::vector<size_t> by_launch(visitors);
          std::vector<uint32_t> expected(ranks.size());
          for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<uint32_t>(i);
          ASSERT_TRUE(std::is_sorted(by_launch.begin(), by_launch.end()));
          ASSERT_EQ(ranks, expected) << o.text << ": ranks of the visitors of a Q tile, in launch order";
        }
        // Which warpgroups add on a visit: both, or (the half-visit skip of partial box visits) a
        // pseudo-random choice of both, one, the other or, rarely, neither.
        auto both = [](size_t, size_t, int) { return true; };
        auto some = [](size_t tile, size_t visit, int group) {
          const uint64_t h = (tile * 0x9E3779B97F4A7C15ull) ^ (visit * 0xC2B2AE3D27D4EB4Full);
          const uint64_t pick = (h >> 17) % 16;  // 0..5 both, 6..10 warpgroup 0, 11..14 warpgroup 1, 15 neither
          return pick < 6 || (group == 0 ? pick <= 10 : pick >= 11 && pick <= 14);
        };
        for (const int groups : {1, 2}) {  // KV tiles of 64 keys (one MMA warpgroup) and of 128 (two)
          for (const int slots : {1, 3, 1 << 20}) {
            for (const int splits : {1, 3}) {
              ASSERT_TRUE(simulate(g, slots, splits, groups, both))
                  << o.text << ": deadlock with " << groups << " MMA warpgroups, " << slots << " CTA slots and "
                  << splits << " splits per KV tile";
              ASSERT_TRUE(simulate(g, slots, splits, groups, some))
                  << o.text << ": deadlock with " << groups << " MMA warpgroups, " << slots << " CTA slots, " << splits
                  << " splits per KV tile and warpgroups that skip visits";
            }
          }
        }
      }
    }
  }
}

TEST(FmhaBackwardDqOrder, DescendingLaunchVisitsEveryTileOnce) {
  const int32_t tiles[kMaxDims] = {3, 4, 5};
  std::vector<int32_t> linear;
  for (int32_t x = 0; x < 2 * 60; ++x) linear.push_back(descending_launch_tile(x, tiles));  // two dilation groups
  EXPECT_EQ(linear.front(), 59) << "the last position of group 0 launches first";
  EXPECT_EQ(linear[1], 59 - 20) << "then the next lower position along the first (least significant) dimension";
  std::sort(linear.begin(), linear.end());
  for (int32_t i = 0; i < 120; ++i) ASSERT_EQ(linear[static_cast<size_t>(i)], i);
}

TEST(FmhaBackwardDqOrder, NeighborhoodVisitorsTakeTurnsInLaunchOrderWithoutDeadlock) {
  std::mt19937_64 rng(7001);
  for (int dims = 1; dims <= 3; ++dims) {
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE("dims " + std::to_string(dims) + " trial " + std::to_string(trial));
      check_problem(random_problem(rng, dims, false));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(FmhaBackwardDqOrder, FlatDenseAndCausalVisitorsTakeTurnsInLaunchOrderWithoutDeadlock) {
  std::mt19937_64 rng(7002);
  for (int trial = 0; trial < 120; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_problem(random_problem(rng, 1, true));
    if (HasFatalFailure()) return;
  }
}

TEST(FmhaBackwardDqOrder, VisitorBoundsTableHoldsEveryDimensionGroupAndPositionOnce) {
  FmhaBackwardParams p;
  p.dims = 3;
  const int32_t dilation[kMaxDims] = {2, 1, 3};
  const int32_t q_tiles[kMaxDims] = {5, 7, 4};
  for (int d = 0; d < kMaxDims; ++d) {
    p.dilation[d] = dilation[d];
    p.q_tiles[d] = q_tiles[d];
  }
  std::vector<int64_t> seen;
  for (int d = 0; d < p.dims; ++d) {
    for (int32_t g = 0; g < p.dilation[d]; ++g) {
      for (int32_t t = 0; t < p.q_tiles[d]; ++t) seen.push_back(visitor_bounds_index(p, d, g, t));
    }
  }
  ASSERT_EQ(static_cast<int64_t>(seen.size()), visitor_bounds_count(p));
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<int64_t>(i));
}

}  // namespace
}  // namespace attnkit::cuda::fmha
