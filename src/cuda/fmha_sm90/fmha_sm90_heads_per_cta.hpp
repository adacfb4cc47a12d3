// How many query heads one CTA of the Hopper forward kernel runs in turn (FmhaParams::heads_per_cta), and how many
// KV heads one CTA of the Hopper backward dK/dV kernel runs (FmhaBackwardParams::heads_per_cta).
//
// A CTA pays a fixed cost before its first product (resolving its tile, the mask policy's tile ranges and
// mask tables, the first Q and K/V loads) and after its last (the epilogue): ~8 000-14 000 SM cycles,
// against ~2 500-3 400 per KV tile (docs/perf.md, the traces of the Hopper forward). Small windows and
// short sequences visit 2-8 KV tiles per CTA, so that fixed cost is a third to a half of the kernel. With
// several heads per CTA the policy state is set up once (a box mask is the same for every head), and the
// producer loads the next head's first K/V tile and Q tile while the consumers finish the previous head.
// Only the TMA path does it (one producer thread issues every load) and only with box masks (tile lists
// may differ per head). Fewer, longer CTAs fill the GPU in fewer waves but leave it idle in a partial last
// wave: the choice weighs both (heads_per_cta_cost).
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha_sm90 {

// The widest compiled head dim whose forward kernels of 128 query rows run several heads per CTA
// (Sm90FmhaTraits::kSeveralHeadsPerCta): at D 128 the head loop's live values spill there. The kernels of 64 query
// rows run several heads per CTA at every width.
inline constexpr int kSeveralHeadsMaxHeadDim = 64;

// The CTAs a GPU keeps resident at once for a kernel: `total` (SMs x CTAs per SM; 0: unknown, 132 assumed) and
// `per_sm`.
struct CtaSlots {
  int total = 0;
  int per_sm = 1;
};

// The heads per CTA for a launch of `p` (p.heads_per_cta is ignored) on a GPU that keeps `cta_slots` of its CTAs
// resident at once: 1 unless `head_independent_tma` (box policy, Q and K/V by TMA); else the count of at most 8 (2
// with a causal prefix, or a causal neighborhood of more than 16 KV tiles a head) whose grid takes the least time by
// heads_per_cta_cost.
int choose_heads_per_cta(const fmha::FmhaParams& p, bool head_independent_tma, const CtaSlots& cta_slots);

// The model behind that choice, in units of one head's work in a CTA: waves of CTAs (cta_slots.total a wave; a
// partial last wave counts by its fraction from four CTAs per SM on or when every dimension is a neighborhood of at
// most 512 keys a query in all, else whole) times each CTA's fixed cost plus its heads. The fixed cost is 0.3 of a
// head visiting up to four KV tiles and shrinks in proportion for longer heads (a head's KV tiles: the window's keys,
// else the key sequence, half of it under a causal prefix, over a tile's keys).
double heads_per_cta_cost(const fmha::FmhaParams& p, int heads, const CtaSlots& cta_slots);

// The KV heads per CTA of the Hopper backward dK/dV kernel for a launch of `p` (FmhaBackwardParams::heads_per_cta,
// ignored here): 1 unless `head_independent` (box policy, one CTA per KV tile: no KV-parallel split, no ordered dQ);
// else the count by the same wave model and caps over the grid's CTAs per KV head. The kernel
// reuses its visit schedule and mask tables for each head, and the next head's first Q / dO stage loads while the MMA
// warpgroups finish the previous head (fmha_sm90_backward_dkdv.cuh).
int choose_backward_heads_per_cta(const fmha::FmhaBackwardParams& p, bool head_independent, const CtaSlots& cta_slots);

// Tests: force the heads per CTA of every later eligible launch, forward and backward (0: choose as above).
void set_heads_per_cta_override(int heads);

}  // namespace attnkit::cuda::fmha_sm90
