// What the host-side box walk simulations share (box_tile_visits.cc, the forward's KV tile walk, and
// box_tile_visits_backward.cc, the backward's Q tile walk): the neighborhood problems they print, the
// CTA odometer over dilation groups and tiles, and the loop that prints each problem's walks with the
// shapes chosen for aligned and for window origins.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"

namespace attnkit::bench {

using cuda::DimKeyTiles;
using cuda::KvTileOrigin;
using cuda::fmha::BoxGeometry;
using cuda::fmha::BoxShapes;

struct Problem {
  std::string name;
  int dims;
  std::array<int64_t, 3> extent;
  std::array<int64_t, 3> kernel;
  std::array<int64_t, 3> dilation;
  std::array<bool, 3> causal;
};

// The problems both walks print; the forward's list also has a window of 512 keys (with_window_512).
inline std::vector<Problem> neighborhood_problems(bool with_window_512) {
  std::vector<Problem> problems = {
      {"na1d L8192 K64", 1, {8192, 1, 1}, {64, 1, 1}, {1, 1, 1}, {false, false, false}},
      {"na1d L8192 K256 causal", 1, {8192, 1, 1}, {256, 1, 1}, {1, 1, 1}, {true, false, false}},
      {"na2d 32x32 K7", 2, {32, 32, 1}, {7, 7, 1}, {1, 1, 1}, {false, false, false}},
      {"na2d 56x56 K7", 2, {56, 56, 1}, {7, 7, 1}, {1, 1, 1}, {false, false, false}},
      {"na2d 56x56 K7 dil8", 2, {56, 56, 1}, {7, 7, 1}, {8, 8, 1}, {false, false, false}},
      {"na3d 8x32x32 K3x7x7", 3, {8, 32, 32}, {3, 7, 7}, {1, 1, 1}, {false, false, false}},
      {"na2d 32x32 K3", 2, {32, 32, 1}, {3, 3, 1}, {1, 1, 1}, {false, false, false}},
      {"na2d 32x32 K5", 2, {32, 32, 1}, {5, 5, 1}, {1, 1, 1}, {false, false, false}},
      {"na2d 56x56 K13", 2, {56, 56, 1}, {13, 13, 1}, {1, 1, 1}, {false, false, false}},
      {"na1d L8192 K64 causal", 1, {8192, 1, 1}, {64, 1, 1}, {1, 1, 1}, {true, false, false}},
  };
  if (with_window_512) {
    problems.push_back({"na1d L8192 K512", 1, {8192, 1, 1}, {512, 1, 1}, {1, 1, 1}, {false, false, false}});
  }
  problems.push_back({"na2d 57x61 K7 dil3", 2, {57, 61, 1}, {7, 7, 1}, {3, 3, 1}, {false, false, false}});
  return problems;
}

inline int log2_of(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return l;
}

// Calls visit(index) for every index below `limit` in the first `dims` dimensions, the last one
// fastest (the CTA order of the kernels' grids).
template <typename Visit>
void for_each_index(int dims, const std::array<int64_t, 3>& limit, Visit&& visit) {
  std::array<int64_t, 3> index{0, 0, 0};
  while (true) {
    visit(index);
    int d = dims - 1;
    while (d >= 0 && ++index[d] == limit[d]) index[d--] = 0;
    if (d < 0) break;
  }
}

// Calls visit(n, tile) for every CTA of one (batch, head): per dilation group (n: its tokens per
// dimension), every tile of 2^tile_log2 tokens per dimension.
template <typename Visit>
void for_each_cta(const BoxGeometry& g, const std::array<int, 3>& tile_log2, Visit&& visit) {
  for_each_index(g.dims, g.dilation, [&](const std::array<int64_t, 3>& group) {
    std::array<int64_t, 3> n{1, 1, 1};
    std::array<int64_t, 3> tiles{1, 1, 1};
    for (int d = 0; d < g.dims; ++d) {
      n[d] = detail::dilation_group_size(g.extent[d], g.dilation[d], group[d]);
      tiles[d] = (n[d] + (int64_t{1} << tile_log2[d]) - 1) >> tile_log2[d];
    }
    for_each_index(g.dims, tiles, [&](const std::array<int64_t, 3>& tile) { visit(n, tile); });
  });
}

// "Q/KV" box extents per dimension, e.g. "8x16/16x8".
inline std::string shape_text(const BoxShapes& s, int dims) {
  std::string q;
  std::string k;
  for (int d = 0; d < dims; ++d) {
    if (d > 0) {
      q.push_back('x');
      k.push_back('x');
    }
    q.append(std::to_string(1 << s.q_log2[d]));
    k.append(std::to_string(1 << s.kv_log2[d]));
  }
  return q + "/" + k;
}

// For each problem: its name, then report(label, geometry, shapes, origins) for the shapes chosen for
// aligned origins at aligned ("aligned") and at window origins ("window"), and for the shapes chosen for
// window origins ("window*") when they differ. choose(geometry, origins) picks the shapes.
template <typename Choose, typename Report>
void print_walks(const std::vector<Problem>& problems, Choose&& choose, Report&& report) {
  for (const Problem& pr : problems) {
    std::array<NeighborhoodDim, kMaxTokenDims> nd{};
    std::array<int64_t, kMaxTokenDims> extents{1, 1, 1};
    for (int d = 0; d < pr.dims; ++d) {
      nd[d].kernel_size = pr.kernel[d];
      nd[d].dilation = pr.dilation[d];
      nd[d].causal = pr.causal[d];
      extents[d] = pr.extent[d];
    }
    const BoxGeometry g = cuda::fmha::neighborhood_geometry(pr.dims, nd, extents);
    const BoxShapes before = choose(g, KvTileOrigin::aligned);
    const BoxShapes after = choose(g, KvTileOrigin::window);
    std::printf("%s\n", pr.name.c_str());
    report("aligned", g, before, KvTileOrigin::aligned);
    report("window", g, before, KvTileOrigin::window);
    if (after.q_log2 != before.q_log2 || after.kv_log2 != before.kv_log2) {
      report("window*", g, after, KvTileOrigin::window);
    }
  }
}

}  // namespace attnkit::bench
