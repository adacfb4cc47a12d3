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
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "box_tile_visits.hpp"

namespace attnkit::bench {
namespace {

struct Walk {
  double ctas = 0;
  double tiles = 0;
  double full = 0;
  double union_keys = 0;
  double attended_pairs = 0;
};

// Every CTA of one (batch, head): dilation groups x Q tiles per dimension, each walked as
// BoxPolicy::init does.
Walk walk(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins) {
  Walk w;
  for_each_cta(g, s.q_log2, [&](const std::array<int64_t, 3>& n, const std::array<int64_t, 3>& tile) {
    double count = 1;
    double full = 1;
    double keys = 1;
    double pairs = 1;
    for (int d = 0; d < g.dims; ++d) {
      const int64_t q_first = tile[d] << s.q_log2[d];
      const int64_t q_last = std::min(q_first + (int64_t{1} << s.q_log2[d]), n[d]) - 1;
      const DimKeyTiles r = cuda::dim_key_tiles(g.rule[d], q_first, q_last, n[d], s.kv_log2[d], origins);
      const auto lo = cuda::window_of(g.rule[d], q_first, n[d]);
      const auto hi = cuda::window_of(g.rule[d], q_last, n[d]);
      double attended = 0;
      for (int64_t i = q_first; i <= q_last; ++i) {
        const auto wi = cuda::window_of(g.rule[d], i, n[d]);
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
  });
  return w;
}

void report(const char* label, const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins, int block_m,
            int block_n) {
  const Walk w = walk(g, s, origins);
  const auto model = cuda::fmha::count_box_visits(g, s, origins);
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
}  // namespace attnkit::bench

int main(int argc, char** argv) {
  namespace bench = attnkit::bench;
  const int block_m = argc > 2 ? std::atoi(argv[1]) : 128;
  const int block_n = argc > 2 ? std::atoi(argv[2]) : 128;
  const int m = bench::log2_of(block_m);
  const int n = bench::log2_of(block_n);
  std::printf("Q tiles of %d queries, KV tiles of %d keys (boxes: Q/KV per dimension)\n", block_m, block_n);
  std::printf(
      "aligned: shapes chosen for aligned origins, aligned origins; window: the same shapes at window origins;\n"
      "window*: the shapes chosen for window origins (when they differ), at window origins\n");
  bench::print_walks(
      bench::neighborhood_problems(true),
      [&](const bench::BoxGeometry& g, bench::KvTileOrigin origins) {
        return attnkit::cuda::fmha::choose_box_shapes(g, m, n, false, origins);
      },
      [&](const char* label, const bench::BoxGeometry& g, const bench::BoxShapes& s, bench::KvTileOrigin origins) {
        bench::report(label, g, s, origins, block_m, block_n);
      });
  return 0;
}
