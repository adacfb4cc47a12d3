#include "tune/attention_tile_work.hpp"

#include <algorithm>
#include <cmath>

namespace attnkit::tune {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tokens of the KV window box of a Q tile of `block_m` flat tokens, as rows of the last dim.
int64_t neighborhood_visited_tiles(const ProblemSpec& spec, int64_t block_m, int64_t block_n) {
  const int dims = spec.token_dims;
  int64_t remaining = block_m;  // Q tokens still to lay out, innermost dim first
  int64_t rows = 1;             // KV box extent over all dims but the last
  int64_t last_span = 1;
  for (int d = dims - 1; d >= 0; --d) {
    const auto& na = spec.neighborhood[static_cast<size_t>(d)];
    const int64_t extent = spec.tokens[static_cast<size_t>(d)];
    const int64_t q_span = std::clamp<int64_t>(remaining, 1, extent);
    remaining = ceil_div(remaining, extent);
    const int64_t kv_span = std::min(extent, q_span + (na.kernel_size - 1) * na.dilation);
    if (d == dims - 1)
      last_span = kv_span;
    else
      rows *= kv_span;
  }
  const int64_t last_extent = spec.tokens[static_cast<size_t>(dims - 1)];
  int64_t tiles = 0;
  if (block_n <= last_extent) {
    // Each row of the box touches ceil(span / block_n) tiles, one more when not aligned.
    tiles = rows * (ceil_div(last_span, block_n) + (last_span < last_extent ? 1 : 0));
  } else {
    tiles = ceil_div(rows * last_extent, block_n) + 1;
  }
  return std::clamp<int64_t>(tiles, 1, ceil_div(spec.seq_k(), block_n));
}

}  // namespace

int64_t visited_kv_tiles(const ProblemSpec& spec, int64_t block_m, int64_t block_n, int64_t q_tile) {
  const int64_t seq_q = spec.seq_q();
  const int64_t seq_k = spec.seq_k();
  const int64_t dense = ceil_div(seq_k, block_n);
  switch (spec.mask) {
    case MaskKind::none: return dense;
    case MaskKind::causal: {
      const int64_t offset = spec.causal_alignment == CausalAlignment::bottom_right ? seq_k - seq_q : 0;
      const int64_t last_query = std::min(seq_q, (q_tile + 1) * block_m) - 1;
      const int64_t keys = std::clamp<int64_t>(last_query + offset + 1, 0, seq_k);
      return ceil_div(keys, block_n);
    }
    case MaskKind::neighborhood: return neighborhood_visited_tiles(spec, block_m, block_n);
    case MaskKind::block:
    case MaskKind::element:
      return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(dense) * spec.density)));
  }
  return dense;
}

TileWork attention_tile_work(const ProblemSpec& spec, int64_t block_m, int64_t block_n) {
  block_m = std::max<int64_t>(block_m, 1);
  block_n = std::max<int64_t>(block_n, 1);
  const int64_t q_tiles = ceil_div(spec.seq_q(), block_m);
  int64_t visited = 0;
  if (spec.mask == MaskKind::causal) {
    for (int64_t i = 0; i < q_tiles; ++i) visited += visited_kv_tiles(spec, block_m, block_n, i);
  } else {
    visited = q_tiles * visited_kv_tiles(spec, block_m, block_n, 0);
  }
  const double element = static_cast<double>(dtype_size(spec.dtype));
  const double d = static_cast<double>(spec.head_dim);
  const double dv = static_cast<double>(spec.head_dim_v);
  const double bm = static_cast<double>(block_m);
  const double bn = static_cast<double>(block_n);
  const double avg_visited = static_cast<double>(visited) / static_cast<double>(q_tiles);
  // QK^T and PV on every visited (padded) tile pair.
  double flops = avg_visited * bm * bn * 2.0 * (d + dv);
  // Q tile in, K and V tiles streamed per Q tile, O tile and LSE out.
  double bytes = (bm * d + avg_visited * bn * (d + dv) + bm * dv) * element + bm * 4.0;
  if (is_backward(spec.op)) {
    flops *= 2.5;
    // dO and O read, dQ written per Q tile; dK and dV accumulated per visited KV tile.
    bytes += (2.0 * bm * dv + bm * d + avg_visited * bn * (d + dv)) * element;
  }
  TileWork work;
  work.tiles = spec.batch * spec.heads_q * q_tiles;
  work.flops_per_tile = flops;
  work.bytes_per_tile = bytes;
  return work;
}

}  // namespace attnkit::tune
