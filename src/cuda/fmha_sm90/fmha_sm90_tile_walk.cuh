// The sequence of KV tiles a mask policy lists for a CTA, walked independently (and identically) by
// the producer and by each consumer warpgroup: the current tile plus the policy's lookahead data for
// the next one (read one step early so its latency stays hidden).
#pragma once

namespace attnkit::cuda::fmha_sm90 {

template <class Policy>
struct TileWalk {
  typename Policy::Tile tile{};
  typename Policy::Lookahead ahead{};

  __device__ __forceinline__ explicit TileWalk(const Policy& policy) {
    if (policy.count() > 0) {
      tile = policy.first_tile(policy.lookahead(0));
      ahead = policy.lookahead(1);
    }
  }

  // Moves from tile i to tile i + 1 (when there is one).
  __device__ __forceinline__ void advance(const Policy& policy, int i) {
    if (i + 1 < policy.count()) {
      tile = policy.next_tile(tile, ahead);
      ahead = policy.lookahead(i + 2);
    }
  }
};

}  // namespace attnkit::cuda::fmha_sm90
