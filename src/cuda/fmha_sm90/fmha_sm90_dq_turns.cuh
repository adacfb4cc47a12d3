// Turns of the ordered dQ additions in the Hopper dK/dV kernel's deterministic mode (the order and why
// it cannot deadlock: fmha_backward_dq_order.hpp).
//
// A turn is taken by one thread of an MMA warpgroup: it spins on the Q tile's counter with acquire
// loads until the counter holds its turn, adds the warpgroup's partial (TMA reductions, or every
// thread's red.global after a barrier), waits until those additions have completed and passes the
// turn on with a release increment. The proxy fences order the TMA unit's (async proxy) global
// accesses after the acquire and before the release, which are generic-proxy operations.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_backward_dq_order.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_backward_tiles.cuh"

namespace attnkit::cuda::fmha_sm90 {

// A warpgroup's turn: the counter of the visit's (batch, query head, Q tile) and the value to wait for.
struct DqTurn {
  uint32_t* counter;
  uint32_t turn;
};

// The turn of MMA warpgroup `group` (of `groups`) on visit `v` of rank `rank` (fmha_backward_dq_order.hpp).
__device__ __forceinline__ DqTurn visit_dq_turn(const fmha::FmhaBackwardParams& p, int32_t batch, const fmha::QVisit& v,
                                                uint32_t rank, int group, int groups) {
  const int64_t row = static_cast<int64_t>(batch) * p.heads_q + v.head;
  return DqTurn{p.dq_turns + row * p.total_q_tiles + v.q_linear, fmha::warpgroup_turn(rank, group, groups)};
}

__device__ __forceinline__ void wait_for_dq_turn(const DqTurn& t) {
  uint32_t seen;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(t.counter) : "memory");
  } while (seen != t.turn);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The caller's additions have completed (bulk groups waited for, or red.global followed by a fence and a
// barrier with their threads).
__device__ __forceinline__ void pass_dq_turn(uint32_t* counter) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}

}  // namespace attnkit::cuda::fmha_sm90
