// How much work a fused attention kernel with a (block_m x block_n) tiling does on a problem:
// blocks launched (one per Q tile, batch and head), FLOPs and bytes per block, counting what the
// kernel really touches rather than the useful work:
//  - tile quantisation: a partial Q or KV tile costs a full one;
//  - K/V re-reads: every Q tile streams all the KV tiles it visits from memory;
//  - mask skipping: causal visits KV tiles up to the diagonal, neighborhood visits the tiles that
//    cover its Q tile's window box, sparse masks visit `density` of the dense tiles.
// The neighborhood box assumes flat row-major tiles (a tile of block_m tokens covers whole rows of
// the last dims first); kernels with box-shaped tiles pass the box's token count as block_m.
// Backward counts 2.5x the forward FLOPs (DESIGN §5) and reads/writes Q, K, V, O, dO and the grads.
#pragma once
#include <cstdint>

#include "tune/problem_spec.hpp"
#include "tune/roofline.hpp"

namespace attnkit::tune {

// KV tiles of size block_n that Q tile `q_tile` (of size block_m) visits, for one (batch, head).
int64_t visited_kv_tiles(const ProblemSpec& spec, int64_t block_m, int64_t block_n, int64_t q_tile);

TileWork attention_tile_work(const ProblemSpec& spec, int64_t block_m, int64_t block_n);

}  // namespace attnkit::tune
