// Host-side simulation of the forward box policy's KV tile walk (no GPU): for neighborhood problems,
// the box shapes the forward launch picks (choose_box_shapes) and, per CTA (one Q tile of one dilation
// group, as resolve_cta enumerates them), the KV tiles BoxPolicy::init lists (dim_key_tiles, the
// function the kernels call), with KV tiles at aligned origins and at window origins (KvTileOrigin;
// the forward walks the latter). Prints per problem: the Q and KV box shapes, the mean KV tiles per CTA, the
// share of full tiles, the keys the CTA's windows need over the keys its tiles load (union / visited
// keys) and the attended (query, key) pairs over the score elements computed (pairs / computed).
//
// Built in CUDA builds (bench/CMakeLists.txt); it needs only host code, so without a CUDA build:
//   g++ -std=c++20 -O2 -Iinclude -Isrc bench/box_tile_visits.cc src/cuda/fmha/fmha_box_shape.cpp -o box_tile_visits
// Usage: box_tile_visits [block_m block_n]   (default 128 128, the Hopper forward's tiles)
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"

namespace {

using attnkit::kMaxTokenDims;
using attnkit::NeighborhoodDim;
using attnkit::cuda::DimKeyTiles;
using attnkit::cuda::KvTileOrigin;
using attnkit::cuda::fmha::BoxGeometry;
using attnkit::cuda::fmha::BoxShapes;

struct Problem {
  std::string name;
  int dims;
  std::array<int64_t, 3> extent;
  std::array<int64_t, 3> kernel;
  std::array<int64_t, 3> dilation;
  std::array<bool, 3> causal;
};

struct Walk {
  double ctas = 0;
  double tiles = 0;
  double full = 0;
  double union_keys = 0;
  double attended_pairs = 0;
};

int log2_of(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  return l;
}

// Every CTA of one (batch, head): dilation groups x Q tiles per dimension, each walked as
// BoxPolicy::init does.
Walk walk(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins) {
  Walk w;
  std::array<int64_t, 3> group{0, 0, 0};
  while (true) {
    std::array<int64_t, 3> n{1, 1, 1};
    std::array<int64_t, 3> q_tiles{1, 1, 1};
    for (int d = 0; d < g.dims; ++d) {
      n[d] = attnkit::detail::dilation_group_size(g.extent[d], g.dilation[d], group[d]);
      q_tiles[d] = (n[d] + (int64_t{1} << s.q_log2[d]) - 1) >> s.q_log2[d];
    }
    std::array<int64_t, 3> tile{0, 0, 0};
    while (true) {
      double count = 1;
      double full = 1;
      double keys = 1;
      double pairs = 1;
      for (int d = 0; d < g.dims; ++d) {
        const int64_t q_first = tile[d] << s.q_log2[d];
        const int64_t q_last = std::min(q_first + (int64_t{1} << s.q_log2[d]), n[d]) - 1;
        const DimKeyTiles r = attnkit::cuda::dim_key_tiles(g.rule[d], q_first, q_last, n[d], s.kv_log2[d], origins);
        const auto lo = attnkit::cuda::window_of(g.rule[d], q_first, n[d]);
        const auto hi = attnkit::cuda::window_of(g.rule[d], q_last, n[d]);
        double attended = 0;
        for (int64_t i = q_first; i <= q_last; ++i) {
          const auto wi = attnkit::cuda::window_of(g.rule[d], i, n[d]);
          attended += static_cast<double>(wi.end - wi.begin);
        }
        count *= static_cast<double>(r.count);
        full *= static_cast<double>(r.full_end - r.full_first);
        keys *= static_cast<double>(hi.end > lo.begin ? hi.end - lo.begin : 0);
        pairs *= attended;
      }
      w.ctas += 1;
      w.tiles += count;
      w.full += full;
      w.union_keys += keys;
      w.attended_pairs += pairs;
      int d = g.dims - 1;
      while (d >= 0 && ++tile[d] == q_tiles[d]) tile[d--] = 0;
      if (d < 0) break;
    }
    int d = g.dims - 1;
    while (d >= 0 && ++group[d] == g.dilation[d]) group[d--] = 0;
    if (d < 0) break;
  }
  return w;
}

std::string shape_text(const BoxShapes& s, int dims) {
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

void report(const char* label, const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins, int block_m,
            int block_n) {
  const Walk w = walk(g, s, origins);
  const auto model = attnkit::cuda::fmha::count_box_visits(g, s, origins);
  if (model.visited != w.tiles || model.full != w.full) {
    std::fprintf(stderr, "cost model (%g visits, %g full) disagrees with the per-CTA walk (%g, %g)\n", model.visited,
                 model.full, w.tiles, w.full);
    std::exit(1);
  }
  std::printf(
      "    %-8s boxes %-14s tiles/CTA %5.2f  full %5.1f%%  union/visited keys %5.1f%%  pairs/computed %5.1f%%\n", label,
      shape_text(s, g.dims).c_str(), w.tiles / w.ctas, w.tiles > 0 ? 100.0 * w.full / w.tiles : 0.0,
      100.0 * w.union_keys / (w.tiles * block_n), 100.0 * w.attended_pairs / (w.tiles * block_m * block_n));
}

}  // namespace

int main(int argc, char** argv) {
  const int block_m = argc > 2 ? std::atoi(argv[1]) : 128;
  const int block_n = argc > 2 ? std::atoi(argv[2]) : 128;
  const std::vector<Problem> problems = {
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
      {"na1d L8192 K512", 1, {8192, 1, 1}, {512, 1, 1}, {1, 1, 1}, {false, false, false}},
      {"na2d 57x61 K7 dil3", 2, {57, 61, 1}, {7, 7, 1}, {3, 3, 1}, {false, false, false}},
  };
  std::printf("Q tiles of %d queries, KV tiles of %d keys (boxes: Q/KV per dimension)\n", block_m, block_n);
  std::printf(
      "aligned: shapes chosen for aligned origins, aligned origins; window: the same shapes at window origins;\n"
      "window*: the shapes chosen for window origins (when they differ), at window origins\n");
  for (const Problem& pr : problems) {
    std::array<NeighborhoodDim, kMaxTokenDims> nd{};
    std::array<int64_t, kMaxTokenDims> extents{1, 1, 1};
    for (int d = 0; d < pr.dims; ++d) {
      nd[d].kernel_size = pr.kernel[d];
      nd[d].dilation = pr.dilation[d];
      nd[d].causal = pr.causal[d];
      extents[d] = pr.extent[d];
    }
    const BoxGeometry g = attnkit::cuda::fmha::neighborhood_geometry(pr.dims, nd, extents);
    const int m = log2_of(block_m);
    const int n = log2_of(block_n);
    const BoxShapes before = attnkit::cuda::fmha::choose_box_shapes(g, m, n, false, KvTileOrigin::aligned);
    const BoxShapes after = attnkit::cuda::fmha::choose_box_shapes(g, m, n, false, KvTileOrigin::window);
    std::printf("%s\n", pr.name.c_str());
    report("aligned", g, before, KvTileOrigin::aligned, block_m, block_n);
    report("window", g, before, KvTileOrigin::window, block_m, block_n);
    if (after.q_log2 != before.q_log2 || after.kv_log2 != before.kv_log2) {
      report("window*", g, after, KvTileOrigin::window, block_m, block_n);
    }
  }
  return 0;
}
