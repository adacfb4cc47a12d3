#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"

#include <cstdlib>

#include <atomic>

namespace attnkit::cuda::fmha_sm90 {
namespace {

std::atomic<int> heads_override{0};

// Two heads per CTA halve the grid: only grids that stay above ~8 waves of one CTA per SM on a 132-SM
// GPU pair their heads, so the last wave's imbalance stays small.
constexpr int64_t kMinCtasAfterPairing = 1024;

// ATTNKIT_SM90_HEADS_PER_CTA=<n> (benchmarks): n heads per eligible CTA instead of the rule; read once.
int environment_heads() {
  static const int heads = [] {
    const char* text = std::getenv("ATTNKIT_SM90_HEADS_PER_CTA");
    const int value = text == nullptr ? 0 : std::atoi(text);
    return value > 0 ? value : 0;
  }();
  return heads;
}

}  // namespace

int choose_heads_per_cta(const fmha::FmhaParams& p, bool head_independent_tma) {
  if (!head_independent_tma || p.heads_q < 2) return 1;
  int forced = heads_override.load(std::memory_order_relaxed);
  if (forced == 0) forced = environment_heads();
  if (forced > 0) return forced < p.heads_q ? forced : p.heads_q;
  const int64_t ctas = int64_t{p.total_q_tiles} * p.batch * ((p.heads_q + 1) / 2);
  return ctas >= kMinCtasAfterPairing ? 2 : 1;
}

void set_heads_per_cta_override(int heads) { heads_override.store(heads, std::memory_order_relaxed); }

}  // namespace attnkit::cuda::fmha_sm90
