// How many query heads one CTA of the Hopper forward kernel runs in turn (FmhaParams::heads_per_cta).
//
// A CTA pays a fixed cost before its first product (resolving its tile, the mask policy's tile ranges and
// mask tables, the first Q and K/V loads) and after its last (the epilogue): ~8 000-14 000 SM cycles,
// against ~2 500-3 400 per KV tile (docs/perf.md, the traces of the Hopper forward). Small windows and
// short sequences visit 2-8 KV tiles per CTA, so that fixed cost is a third to a half of the kernel. With
// several heads per CTA the policy state is set up once (a box mask is the same for every head), and the
// producer loads the next head's first K/V tile and Q tile while the consumers finish the previous head.
// Only the TMA path does it (one producer thread issues every load) and only with box masks (tile lists
// may differ per head); the grid must stay large enough to fill the GPU several times over.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha_sm90 {

// The heads per CTA for a launch of `p` (p.heads_per_cta is ignored): 1 unless `head_independent_tma`
// (box policy, Q and K/V by TMA) and the grid keeps at least kMinCtasAfterPairing CTAs.
int choose_heads_per_cta(const fmha::FmhaParams& p, bool head_independent_tma);

// Tests: force the heads per CTA of every later eligible launch (0: choose as above).
void set_heads_per_cta_override(int heads);

}  // namespace attnkit::cuda::fmha_sm90
