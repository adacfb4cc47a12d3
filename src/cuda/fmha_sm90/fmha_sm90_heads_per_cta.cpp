#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace attnkit::cuda::fmha_sm90 {
namespace {

std::atomic<int> heads_override{0};

// A CTA's fixed cost (setup, first loads, launch share) relative to one head's work in it, and the most
// heads a CTA runs: fitted to a sweep of forced heads per CTA (1, 2, 3, 4, 8) over 11 small-window,
// 1-D, 3-D and short dense problems on an H200 (docs/perf.md), where ceil(waves) x (0.3 + h) ranks the
// choices as measured, the 1.3-wave grid of 3 heads and the half-empty wave of 8 included. Those heads visit up to
// about kFittedKvTilesPerHead KV tiles; the forward's longer heads carry the same fixed cost over more tiles, so
// it shrinks in proportion (dense S 2048-8192 D 64 on the 192-row kernel, H200: one head per CTA 2-7 % faster than
// the 0.3 rule's four, whose grids leave a partial last wave of 0.6-0.7; docs/perf.md).
constexpr double kFixedCostPerHead = 0.3;
constexpr double kFittedKvTilesPerHead = 4.0;
constexpr int kMaxHeadsPerCta = 8;
// Causal prefixes give the CTAs of one grid unequal work (the last Q tiles see the most keys): longer CTAs
// would leave a longer tail, so they pair at most two heads. So do the forward's causal neighborhoods of heads
// longer than kUnequalKvTilesPerHead KV tiles (the first queries see fewer keys): na1d causal L8192 K4096 D64 B4
// H16 ran 1.43 ms with the eight heads a CTA the wave model picks, 1.19 with two, 1.17 with one (H200; causal K256
// and K64, about four KV tiles a head, were 7-10 % faster with four heads than with two).
constexpr int kMaxHeadsPerCtaWithPrefix = 2;
constexpr double kUnequalKvTilesPerHead = 16.0;
constexpr int kDefaultCtaSlots = 132;

// ATTNKIT_SM90_HEADS_PER_CTA=<n> (benchmarks): n heads per eligible CTA instead of the rule; read once.
int environment_heads() {
  static const int heads = [] {
    const char* text = std::getenv("ATTNKIT_SM90_HEADS_PER_CTA");
    const int value = text == nullptr ? 0 : std::atoi(text);
    return value > 0 ? value : 0;
  }();
  return heads;
}

// A partial last wave costs its share of a wave, not a whole one, when the GPU keeps at least
// kCtasPerSmOfFractionalWaves CTAs per SM or when each query sees a neighborhood of at most kShortWindowKeys keys: an
// SM left with fewer of its CTAs in a partial last wave runs each faster, and short CTAs of unequal length (two to
// eight KV tiles a head, fewer at the edges) blur the waves. Fitted to sweeps of forced heads per CTA (1, 2, 4, 8) on
// an H200 (docs/perf.md): on seven small windows with the 64-row forward kernels at four CTAs per SM, whole waves
// picked one head per CTA on 20² windows that ran 30 % faster with four; at two CTAs per SM fractional waves pick the
// best on six backward windows of 9-49 keys and eight D128 forward windows of 9-256 keys (whole waves miss 20² K3 on
// both, by 6 % and 22 %). Whole waves stay for long CTAs: on the forward's two-CTA rows of windows of 2209-2401 keys
// (about fifty KV tiles a head) a forced sweep found one head per CTA best where fractional waves would pick four
// (na2d 96² K47 B2 H8: 39 % slower); and for dense dimensions, whose equal tiles keep the waves sharp (dense S384 D64
// B64 H8 ran 24 % slower forward and 21 % slower backward with fractional waves).
constexpr int kCtasPerSmOfFractionalWaves = 4;
constexpr int64_t kShortWindowKeys = 512;

// Keys one query sees at most if every dimension of the window space is a neighborhood (the product of the kernel
// sizes, each at most its dilation group's keys); else -1.
template <class Params>
int64_t neighborhood_keys(const Params& p) {
  int64_t keys = 1;
  for (int d = 0; d < p.dims; ++d) {
    if (p.rule[d].kind != WindowKind::neighborhood) return -1;
    const int64_t group = (int64_t{p.kv_space.extent[d]} + p.dilation[d] - 1) / p.dilation[d];
    keys *= std::min<int64_t>(p.rule[d].window, group);
  }
  return keys;
}

// KV tiles a query tile of one head visits, about: the window's keys (else the key sequence, half of it under a
// causal prefix) over a KV tile's keys.
double kv_tiles_per_head(const fmha::FmhaParams& p) {
  int tile_log2 = 0;
  int64_t extent_keys = 1;
  bool prefix = false;
  for (int d = 0; d < p.dims; ++d) {
    tile_log2 += p.kv_space.box_log2[d];
    extent_keys *= p.kv_space.extent[d];
    prefix = prefix || p.rule[d].kind == WindowKind::prefix;
  }
  int64_t keys = neighborhood_keys(p);
  if (keys < 0) keys = std::max<int64_t>(extent_keys, p.kv_space.flat_extent);
  return static_cast<double>(keys) / (prefix ? 2.0 : 1.0) / static_cast<double>(int64_t{1} << tile_log2);
}

// The forward's fixed cost per CTA, in heads, for heads of `kv_tiles` KV tiles: kFixedCostPerHead up to
// kFittedKvTilesPerHead tiles.
double forward_fixed_cost(double kv_tiles) {
  return kFixedCostPerHead * std::min(1.0, kFittedKvTilesPerHead / std::max(kv_tiles, 1.0));
}

template <class Params>
bool partial_waves_by_fraction(const Params& p, const CtaSlots& slots) {
  if (slots.per_sm >= kCtasPerSmOfFractionalWaves) return true;
  const int64_t keys = neighborhood_keys(p);
  return keys > 0 && keys <= kShortWindowKeys;
}

// Waves of ctas_per_head * ceil(heads_total / heads) CTAs over cta_slots resident at once (SMs x CTAs per SM) times
// each CTA's fixed cost plus its heads; a partial last wave whole, or by its fraction (at least one wave) when
// `fractional`.
double wave_cost(int64_t ctas_per_head, int heads_total, int heads, const CtaSlots& slots, bool fractional,
                 double fixed_cost) {
  const int64_t groups = (heads_total + heads - 1) / heads;
  const int64_t resident = slots.total > 0 ? slots.total : kDefaultCtaSlots;
  const int64_t ctas = ctas_per_head * groups;
  const double waves = fractional ? std::max(1.0, static_cast<double>(ctas) / static_cast<double>(resident))
                                  : static_cast<double>((ctas + resident - 1) / resident);
  return waves * (fixed_cost + heads);
}

// The forced count, else the count of at most `most` heads with the least wave_cost.
int cheapest_heads(int64_t ctas_per_head, int heads_total, int most, const CtaSlots& cta_slots, bool fractional,
                   double fixed_cost) {
  int forced = heads_override.load(std::memory_order_relaxed);
  if (forced == 0) forced = environment_heads();
  if (forced > 0) return forced < heads_total ? forced : heads_total;
  if (most > heads_total) most = heads_total;
  int best = 1;
  double best_cost = wave_cost(ctas_per_head, heads_total, 1, cta_slots, fractional, fixed_cost);
  for (int heads = 2; heads <= most; ++heads) {
    const double cost = wave_cost(ctas_per_head, heads_total, heads, cta_slots, fractional, fixed_cost);
    if (cost < best_cost) {
      best = heads;
      best_cost = cost;
    }
  }
  return best;
}

template <class Params>
int most_heads(const Params& p) {
  for (int d = 0; d < p.dims; ++d) {
    if (p.rule[d].kind == WindowKind::prefix) return kMaxHeadsPerCtaWithPrefix;
  }
  return kMaxHeadsPerCta;
}

}  // namespace

double heads_per_cta_cost(const fmha::FmhaParams& p, int heads, const CtaSlots& cta_slots) {
  return wave_cost(int64_t{p.total_q_tiles} * p.batch, p.heads_q, heads, cta_slots,
                   partial_waves_by_fraction(p, cta_slots), forward_fixed_cost(kv_tiles_per_head(p)));
}

int choose_heads_per_cta(const fmha::FmhaParams& p, bool head_independent_tma, const CtaSlots& cta_slots) {
  if (!head_independent_tma || p.heads_q < 2) return 1;
  const double kv_tiles = kv_tiles_per_head(p);
  int most = most_heads(p);
  bool causal_window = false;
  for (int d = 0; d < p.dims; ++d) causal_window = causal_window || p.rule[d].causal;
  if (causal_window && kv_tiles > kUnequalKvTilesPerHead) most = std::min(most, kMaxHeadsPerCtaWithPrefix);
  return cheapest_heads(int64_t{p.total_q_tiles} * p.batch, p.heads_q, most, cta_slots,
                        partial_waves_by_fraction(p, cta_slots), forward_fixed_cost(kv_tiles));
}

int choose_backward_heads_per_cta(const fmha::FmhaBackwardParams& p, bool head_independent, const CtaSlots& cta_slots) {
  if (!head_independent || p.heads_kv < 2) return 1;
  return cheapest_heads(int64_t{p.total_kv_tiles} * p.batch, p.heads_kv, most_heads(p), cta_slots,
                        partial_waves_by_fraction(p, cta_slots), kFixedCostPerHead);
}

void set_heads_per_cta_override(int heads) { heads_override.store(heads, std::memory_order_relaxed); }

}  // namespace attnkit::cuda::fmha_sm90
