// The producer warpgroup of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh), and the CTA's walk.
//
// The producer copies Q once, then walks the key blocks that the tile map (retention_decay_map_kernel.cuh) marks
// nonzero for the CTA's 128 query rows (the same blocks for every CTA of the cluster: same head and query block). Each
// goes into the next stage of the ring: thread 0 announces the matrix tile's bytes on the stage's `full` barrier and
// issues the TMA boxes of this CTA's share of the tile's rows (128 / cluster rows from 128 / cluster x rank), multicast
// into every CTA of the cluster (zeros past Tq and Tk); every thread copies its pieces of the block's K and V
// (cp.async, zeros past Tk) and arrives once they have landed (cp.async.mbarrier.arrive.noinc). A stage is refilled
// once the consumers of every CTA of the cluster have released it (each consumer thread arrives on every CTA's
// `empty` barrier), since the other CTAs' boxes write into it too. The all-zero tiles of the matrix (a causal matrix's
// upper triangle) are neither read nor computed.
#pragma once
#include <cstdint>

#include <cuda.h>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/cluster_sync.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_decay_map_kernel.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_producer.cuh"

namespace attnkit::cuda::retention {

// CTA `cta`'s part of the decay-matrix forward: the batch fastest (the CTAs of a cluster take batches b, b + 1, ... of
// the same tiles; where the cluster size does not divide the batches, the last cluster computes the last batch again
// and writes it again, the same values), then the value slice, then the query block (the last ones first: under a
// causal matrix they have the most nonzero tiles), then the head.
struct MatrixWalk {
  int64_t b = 0;
  int h = 0;
  int slice = 0;
  int64_t q0 = 0;  // first query row
  int blocks = 0;  // key blocks
};

__device__ __forceinline__ MatrixWalk matrix_walk(const ChunkParams& p, int64_t cta, int cluster) {
  MatrixWalk w;
  const int64_t query_blocks = (p.tokens + 127) / 128;
  const int64_t batches = (p.batches + cluster - 1) / cluster * cluster;
  const int64_t b = cta % batches;
  w.b = b < p.batches ? b : p.batches - 1;
  int64_t rest = cta / batches;
  w.slice = static_cast<int>(rest % p.dv_slices);
  rest /= p.dv_slices;
  w.q0 = (query_blocks - 1 - rest % query_blocks) * 128;
  w.h = static_cast<int>(rest / query_blocks);
  w.blocks = static_cast<int>((p.tokens_k + 63) / 64);
  return w;
}

// Copies box {c0, c1, c2} of `map` to shared `destination` in every CTA of the cluster in `cta_mask`, completing the
// bytes on the mbarrier at `barrier`'s offset in each.
__device__ __forceinline__ void tma_multicast_box(const CUtensorMap* map, uint32_t destination, uint64_t* barrier,
                                                  int c0, int c1, int c2, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3, %4}], [%5], %6;\n" ::"r"(destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(barrier)), "h"(cta_mask)
      : "memory");
}

// Calls visit(block) for each key block, in order, whose tile the map row marks nonzero: 16 map bytes a load, turned
// into a 16-bit mask of the nonzero ones.
template <class Visit>
__device__ __forceinline__ void for_each_nonzero_block(const unsigned char* map_row, int blocks, Visit&& visit) {
#pragma unroll 1
  for (int first = 0; first < blocks; first += 16) {
    const uint4 word = *reinterpret_cast<const uint4*>(map_row + first);
    const uint32_t words[4] = {word.x, word.y, word.z, word.w};
    uint32_t mask = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) mask |= (((words[i / 4] >> (8 * (i % 4))) & 0xffu) != 0 ? 1u : 0u) << i;
#pragma unroll 1
    while (mask != 0) {
      const int i = __ffs(mask) - 1;
      mask &= mask - 1;
      visit(first + i);  // padding bytes past the last block are 0
    }
  }
}

// The map row of the CTA's query rows.
__device__ __forceinline__ const unsigned char* matrix_map_row(const ChunkParams& p, const MatrixWalk& w) {
  return decay_map_row(p, decay_matrix_of_head(p, w.h), w.q0 / 128);
}

template <class Traits>
__device__ __forceinline__ void wgmma_matrix_produce(const ChunkParams& p, const CUtensorMap* matrix_map,
                                                     const MatrixWalk& w, typename Traits::SharedStorage& ss,
                                                     uint32_t rank, uint32_t cluster, int ptid) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kValueBlock = Traits::kValueBlock;
  constexpr int kStages = Traits::kStages;
  const auto* q_base = static_cast<const Element*>(p.q.data) + w.b * p.q.batch + w.h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + w.b * p.k.batch + w.h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + w.b * p.v.batch + w.h * p.v.head +
                       static_cast<int64_t>(w.slice) * kValueBlock;
  const bool f32 = p.decay.f32 != 0;
  const int matrix = decay_matrix_of_head(p, w.h);
  const int share = 128 / static_cast<int>(cluster);  // the tile's rows this CTA loads for the cluster
  const int row0 = static_cast<int>(w.q0) + share * static_cast<int>(rank);
  const auto every_cta = static_cast<uint16_t>((1u << cluster) - 1u);
  const auto unused = [](int, int) -> Element* { return nullptr; };  // the element-wise path: never taken here

  // Q: two halves of 64 rows in the 64-column blocks of 128 rows.
  const uint32_t q_tile = shared_address(ss.q);
  for (int half = 0; half < 2; ++half) {
    wgmma_copy_rows<Element, kHeadDim>(q_tile + half * 64 * 128, 128 * 128, unused, q_base, p.q.token, w.q0 + 64 * half,
                                       p.tokens, true, ptid);
  }
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&ss.q_full)) : "memory");

  int uses = 0;
  for_each_nonzero_block(matrix_map_row(p, w), w.blocks, [&](int block) {
    const int stage = uses % kStages;
    if (uses >= kStages) cluster_barrier_wait(&ss.empty[stage], ((uses / kStages) & 1) ^ 1);
    const int64_t k0 = int64_t{64} * block;
    if (ptid == 0) {
      // Every CTA's share lands here: the stage's matrix bytes in all.
      asm volatile(
          "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(&ss.full[stage])),
          "r"(static_cast<uint32_t>(f32 ? Traits::kMatrixStageBytes : Traits::kMatrixHalfBytes))
          : "memory");
      const uint32_t tile = shared_address(ss.matrix[stage]) + static_cast<uint32_t>(share * 128 * rank);
      for (int half = 0; half < (f32 ? 2 : 1); ++half) {
        tma_multicast_box(matrix_map, tile + static_cast<uint32_t>(half * Traits::kMatrixHalfBytes), &ss.full[stage],
                          static_cast<int>(k0) + 32 * half, row0, matrix, every_cta);
      }
    }
    wgmma_copy_rows<Element, kHeadDim>(shared_address(ss.k[stage]), 64 * 128, unused, k_base, p.k.token, k0, p.tokens_k,
                                       true, ptid);
    wgmma_copy_rows<Element, kValueBlock>(shared_address(ss.v[stage]), 64 * 128, unused, v_base, p.v.token, k0,
                                          p.tokens_k, true, ptid);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&ss.full[stage]))
                 : "memory");
    ++uses;
  });
  commit_async_copies();
  wait_async_copies<0>();  // nothing in flight when the thread leaves
}

}  // namespace attnkit::cuda::retention
