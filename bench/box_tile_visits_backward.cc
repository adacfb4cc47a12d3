// Host-side simulation of the backward box walks (no GPU), the sibling of box_tile_visits.cc (the
// forward's): for neighborhood problems, the box shapes the backward launch picks
// (choose_backward_box_shapes) and, per dK/dV CTA (one aligned KV tile of one dilation group, as
// decode_tile enumerates them), the Q tiles KvBoxSchedule::init lists (dim_query_tiles, the function the
// kernels call), with Q tiles at aligned origins (before; the Hopper tier's ordered dQ still walks these)
// and at window origins (now). Prints per problem: the Q and KV box shapes, the CTAs (KV tiles) of one
// (batch, KV head), the mean Q tiles per CTA (visits of one query head; shapes with other KV boxes have
// other CTA counts: compare totals, the work), with the Hopper kernel's halves the mean half-tile visits its two MMA
// warpgroups run (a partial visit that misses a half is skipped by it), the share of full visits, the
// queries the CTA's keys need over the queries its tiles load (union / visited queries), the attended
// (query, key) pairs over the score elements computed (pairs / computed), and the portable deterministic
// mode's dQ kernel walk (KV tiles per Q tile, the forward's walk: aligned before, window origins now).
//
// Built in CUDA builds (bench/CMakeLists.txt); it needs only host code, so without a CUDA build:
//   g++ -std=c++20 -O2 -Iinclude -Isrc bench/box_tile_visits_backward.cc src/cuda/fmha/fmha_box_shape.cpp
//       -o box_tile_visits_backward
// Usage: box_tile_visits_backward [block_m block_n halves]   (default 64 128 1, the Hopper dK/dV kernel; the
// portable one: 64 64 0)
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "box_tile_visits.hpp"
#include "cuda/common/tile_range_inverse.hpp"

namespace attnkit::bench {
namespace {

struct Walk {
  double ctas = 0;
  double tiles = 0;
  double half_visits = 0;
  double full = 0;
  double union_queries = 0;
  double attended_pairs = 0;
};

// Queries [first, end) that see at least one key of [k_first, k_last] along one dimension.
std::array<int64_t, 2> seeing_queries(const cuda::WindowRule& rule, int64_t k_first, int64_t k_last, int64_t n) {
  return {cuda::inverse_bound(rule, 0, k_first, k_last, n, n), cuda::inverse_bound(rule, 1, k_first, k_last, n, n)};
}

// The halved dimension of the Hopper kernel's KV box: its outermost of more than one key (-1: none).
int halved_dim(const BoxGeometry& g, const BoxShapes& s) {
  for (int d = 0; d < g.dims; ++d) {
    if (s.kv_log2[d] > 0) return d;
  }
  return -1;
}

// Every dK/dV CTA of one (batch, KV head): dilation groups x KV tiles per dimension, each walked as
// KvBoxSchedule::init does; with halves, each visit counted once per half whose keys it meets
// (half_meets_visit).
Walk walk(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins, bool halves) {
  Walk w;
  const int split = halves ? halved_dim(g, s) : -1;
  for_each_cta(g, s.kv_log2, [&](const std::array<int64_t, 3>& n, const std::array<int64_t, 3>& tile) {
    double count = 1;
    double full = 1;
    double queries = 1;
    double pairs = 1;
    double per_half[2] = {1, 1};
    for (int d = 0; d < g.dims; ++d) {
      const int64_t kv_box = int64_t{1} << s.kv_log2[d];
      const int64_t k_first = tile[d] << s.kv_log2[d];
      const DimKeyTiles r = cuda::dim_query_tiles(g.rule[d], k_first, kv_box, n[d], n[d], s.q_log2[d], origins);
      const auto seen = seeing_queries(g.rule[d], k_first, k_first + kv_box - 1, n[d]);
      double attended = 0;
      for (int64_t k = k_first; k < std::min(k_first + kv_box, n[d]); ++k) {
        const auto q = seeing_queries(g.rule[d], k, k, n[d]);
        attended += static_cast<double>(std::max<int64_t>(q[1] - q[0], 0));
      }
      count *= static_cast<double>(r.count);
      full *= static_cast<double>(r.full_end - r.full_first);
      queries *= static_cast<double>(std::max<int64_t>(seen[1] - seen[0], 0));
      pairs *= attended;
      for (int h = 0; h < 2; ++h) {
        if (d != split) {
          per_half[h] *= static_cast<double>(r.count);
          continue;
        }
        const int64_t half = kv_box / 2;
        const auto hq = seeing_queries(g.rule[d], k_first + h * half, k_first + (h + 1) * half - 1, n[d]);
        int64_t meets = 0;
        for (int64_t j = 0; j < r.count; ++j) {
          const int64_t first = r.origin + (j << s.q_log2[d]);
          if (hq[0] < hq[1] && first < hq[1] && first + (int64_t{1} << s.q_log2[d]) > hq[0]) ++meets;
        }
        per_half[h] *= static_cast<double>(meets);
      }
    }
    w.ctas += 1;
    w.tiles += count;
    w.half_visits += split >= 0 ? per_half[0] + per_half[1] : 2 * count;
    w.full += full;
    w.union_queries += queries;
    w.attended_pairs += pairs;
  });
  return w;
}

// The dQ kernel's walk (QBoxSchedule, the forward's): mean KV tiles per Q tile.
double dq_tiles_per_cta(const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins) {
  double q_tiles = 1;
  for (int d = 0; d < g.dims; ++d) {
    double per_dim = 0;
    for (int64_t group = 0; group < g.dilation[d]; ++group) {
      const int64_t n = detail::dilation_group_size(g.extent[d], g.dilation[d], group);
      per_dim += static_cast<double>((n + (int64_t{1} << s.q_log2[d]) - 1) >> s.q_log2[d]);
    }
    q_tiles *= per_dim;
  }
  return cuda::fmha::count_box_visits(g, s, origins).visited / q_tiles;
}

void report(const char* label, const BoxGeometry& g, const BoxShapes& s, KvTileOrigin origins, bool halves, int block_m,
            int block_n) {
  const Walk w = walk(g, s, origins, halves);
  const auto model = cuda::fmha::count_backward_box_visits(g, s, origins);
  const auto halves_model = cuda::fmha::count_backward_box_visits(g, s, origins, halves);
  if (model.visited != w.tiles || model.full != w.full || (halves && halves_model.visited != w.half_visits)) {
    std::fprintf(stderr,
                 "cost model (%g visits, %g full, %g half visits) disagrees with the per-CTA walk (%g, %g, %g)\n",
                 model.visited, model.full, halves_model.visited, w.tiles, w.full, w.half_visits);
    std::exit(1);
  }
  std::printf(
      "    %-8s boxes %-14s CTAs %5.0f  Q tiles/CTA %5.2f (total %6.0f)  half visits/CTA %5.2f (total %6.0f)  "
      "full %5.1f%%  union/visited queries %5.1f%%  pairs/computed %5.1f%%  dQ kernel KV tiles/CTA %5.2f\n",
      label, shape_text(s, g.dims).c_str(), w.ctas, w.tiles / w.ctas, w.tiles, w.half_visits / w.ctas / 2,
      w.half_visits / 2, w.tiles > 0 ? 100.0 * w.full / w.tiles : 0.0, 100.0 * w.union_queries / (w.tiles * block_m),
      100.0 * w.attended_pairs / (w.tiles * block_m * block_n), dq_tiles_per_cta(g, s, origins));
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) {
  namespace bench = attnkit::bench;
  const int block_m = argc > 3 ? std::atoi(argv[1]) : 64;
  const int block_n = argc > 3 ? std::atoi(argv[2]) : 128;
  const bool halves = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  const int m = bench::log2_of(block_m);
  const int n = bench::log2_of(block_n);
  std::printf("dK/dV CTAs of one KV tile of %d keys visiting Q tiles of %d queries%s (boxes: Q/KV per dimension)\n",
              block_n, block_m, halves ? ", KV tile consumed as two halves" : "");
  std::printf(
      "aligned: shapes chosen for aligned Q tiles, aligned origins (before); window: the same shapes at window\n"
      "origins; window*: the shapes chosen for window origins (when they differ), at window origins (now)\n");
  bench::print_walks(
      bench::neighborhood_problems(false),
      [&](const bench::BoxGeometry& g, bench::KvTileOrigin origins) {
        return attnkit::cuda::fmha::choose_backward_box_shapes(g, m, n, halves, origins);
      },
      [&](const char* label, const bench::BoxGeometry& g, const bench::BoxShapes& s, bench::KvTileOrigin origins) {
        bench::report(label, g, s, origins, halves, block_m, block_n);
      });
  return 0;
}
