// The producer warpgroup of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh), and the CTA's walk.
//
// The producer copies Q once, then walks the key blocks that the tile map (retention_decay_map_kernel.cuh) marks
// nonzero for the CTA's 128 query rows: each goes into the next stage of the ring, its 128 x 64 tile of the matrix
// (16-byte pieces, zeros past Tq and Tk), its K and its V (zeros past Tk), announced on the stage's `full` barrier
// once they have landed (cp.async.mbarrier.arrive.noinc). The producer runs ahead as far as the stages allow; the
// all-zero tiles of the matrix (a causal matrix's upper triangle) are neither read nor computed.
#pragma once
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_producer.cuh"

namespace attnkit::cuda::retention {

// CTA `cta`'s part of the decay-matrix forward: value slice fastest, then the batch (the CTAs that read the same
// tiles of a head's matrix run side by side and all but the first read them from L2), then the query block (the last
// ones first: under a causal matrix they have the most nonzero tiles), then the head.
struct MatrixWalk {
  int64_t b = 0;
  int h = 0;
  int slice = 0;
  int64_t q0 = 0;  // first query row
  int blocks = 0;  // key blocks
};

__device__ __forceinline__ MatrixWalk matrix_walk(const ChunkParams& p, int64_t cta) {
  MatrixWalk w;
  const int64_t query_blocks = (p.tokens + 127) / 128;
  w.slice = static_cast<int>(cta % p.dv_slices);
  int64_t rest = cta / p.dv_slices;
  w.b = rest % p.batches;
  rest /= p.batches;
  w.q0 = (query_blocks - 1 - rest % query_blocks) * 128;
  w.h = static_cast<int>(rest / query_blocks);
  w.blocks = static_cast<int>((p.tokens_k + 63) / 64);
  return w;
}

// Producer thread `ptid`'s pieces of the matrix's tile at rows [q0, q0 + 128) and keys [k0, k0 + 64): piece c of the
// row (c < 16 with float32 entries, 8 with 16-bit ones) of rows ptid / pieces + (128 / pieces) i. For each piece calls
// visit(shared offset in the stage, source, source bytes 0..16).
template <class Visit>
__device__ __forceinline__ void matrix_tile_pieces(const unsigned char* matrix, int64_t row_bytes, int entry_bytes,
                                                   int64_t q0, int64_t tq, int64_t k0, int64_t tk, int ptid,
                                                   Visit&& visit) {
  const int pieces = entry_bytes * 4;  // 16-byte pieces a row of 64 entries
  const int rows_per_pass = 128 / pieces;
  const int c = ptid % pieces;
  const int64_t row_limit = tq - q0;
  const int64_t key_bytes_left = (tk - k0) * entry_bytes - 16 * c;
  const int bytes = key_bytes_left >= 16 ? 16 : key_bytes_left > 0 ? static_cast<int>(key_bytes_left) : 0;
  const unsigned char* source = matrix + q0 * row_bytes + k0 * entry_bytes + 16 * c;
#pragma unroll 4
  for (int r = ptid / pieces; r < 128; r += rows_per_pass) {
    const bool row_in = r < row_limit;
    visit(static_cast<uint32_t>(r * 256 + (((c ^ r) & 7) | (c & 8)) * 16),
          row_in ? static_cast<const void*>(source + r * row_bytes) : static_cast<const void*>(matrix),
          row_in ? bytes : 0);
  }
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
  const int64_t matrix = p.decay.head != 0 ? w.h : 0;
  return p.decay.tile_map + (matrix * ((p.tokens + 127) / 128) + w.q0 / 128) * decay_map_row_bytes(p.tokens_k);
}

template <class Traits>
__device__ __forceinline__ void wgmma_matrix_produce(const ChunkParams& p, const MatrixWalk& w,
                                                     typename Traits::SharedStorage& ss, int ptid) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kValueBlock = Traits::kValueBlock;
  constexpr int kStages = Traits::kStages;
  const auto* q_base = static_cast<const Element*>(p.q.data) + w.b * p.q.batch + w.h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + w.b * p.k.batch + w.h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + w.b * p.v.batch + w.h * p.v.head +
                       static_cast<int64_t>(w.slice) * kValueBlock;
  const int entry_bytes = p.decay.f32 != 0 ? 4 : 2;
  const auto* matrix = static_cast<const unsigned char*>(p.decay.data) + w.h * p.decay.head * entry_bytes;
  const int64_t row_bytes = p.decay.row * entry_bytes;
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
    if (uses >= kStages) fmha_sm90::barrier_wait(&ss.empty[stage], ((uses / kStages) & 1) ^ 1);
    const int64_t k0 = int64_t{64} * block;
    const uint32_t tile = shared_address(ss.matrix[stage]);
    matrix_tile_pieces(matrix, row_bytes, entry_bytes, w.q0, p.tokens, k0, p.tokens_k, ptid,
                       [&](uint32_t offset, const void* source, int bytes) {
                         copy_16_bytes_async_prefix(tile + offset, source, bytes);
                       });
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
