// The producer warpgroup of the Hopper chunkwise retention kernel (retention_wgmma_chunk_kernel.cuh): copies each
// chunk's Q, K and V rows (V: the CTA's value slice) into the chunk's stage of the swizzled tiles, rows past the
// segment's end as zeros, and announces the stage on its `full` barrier. The producer runs ahead of the consumers
// as far as the kStages stages allow: it waits for a stage's release (`empty`: the output and state warpgroups are
// done with it) only to refill it, so chunk c + kStages - 1's copies go out as soon as chunk c - 1 is released. With
// 16-byte cp.async (every operand start and stride allows it: ChunkParams::vector_access) each thread's arrival is
// asynchronous (cp.async.mbarrier.arrive.noinc: it happens when the thread's copies have landed), so a chunk is
// announced as soon as its copies land, whatever the producer waits for then; the consumers fence the generic proxy's
// writes for their wgmma reads after waiting. Element-wise (other strides): loads and shared stores, fenced and
// announced by the producer. The state-only launch copies K and V only.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_chunk_walk.cuh"

namespace attnkit::cuda::retention {

// Rows [t0, t0 + 64) x Cols of one sequence operand into a tile of 128-byte swizzled rows at shared address `tile`
// (Cols / 64 blocks of 64 rows x 64 columns, `block_bytes` apart); element-wise, element (row, col) at
// destination(row, col). Rows at or past `tokens` become zeros. The 128 producer threads share the copies: with
// 16-byte copies thread `ptid` takes column piece ptid % (Cols / 8) of every 128 / (Cols / 8)-th row, so its
// destination advances by a constant (rows 8 apart keep their swizzle).
template <class Element, int Cols, class Destination>
__device__ __forceinline__ void wgmma_copy_rows(uint32_t tile, int block_bytes, const Destination& destination,
                                                const Element* base, int64_t token_stride, int64_t t0, int64_t tokens,
                                                bool vector_access, int ptid) {
  constexpr int kRows = 64;
  constexpr int kVectorsPerRow = Cols / 8;
  constexpr int kRowsPerPass = 128 / kVectorsPerRow;
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows share their swizzle");
  const int64_t left = tokens - t0;
  const int rows = static_cast<int>(left < kRows ? (left > 0 ? left : 0) : kRows);
  if (vector_access) {
    const int col = (ptid % kVectorsPerRow) * 8;
    const int row0 = ptid / kVectorsPerRow;
    const Element* source = base + (t0 + row0) * token_stride + col;
    const uint32_t target = tile + (col / 64) * block_bytes + swizzled_offset(row0, col % 64);
#pragma unroll
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
      const int row = row0 + pass * kRowsPerPass;
      const bool valid = row < rows;
      copy_16_bytes_async(target + pass * kRowsPerPass * 128,
                          valid ? static_cast<const void*>(source + pass * kRowsPerPass * token_stride)
                                : static_cast<const void*>(base),
                          valid);
    }
  } else {
#pragma unroll 1
    for (int i = ptid; i < kRows * Cols; i += 128) {
      const int row = i / Cols;
      const int col = i % Cols;
      *destination(row, col) = row < rows ? base[(t0 + row) * token_stride + col] : Element(0.0f);
    }
  }
}

// One operand's 16-byte copies of a whole chunk (64 rows, vector access) by producer thread `ptid`, with the pieces of
// wgmma_copy_rows: the thread's first source piece of the current chunk and the byte steps between its rows and
// between chunks are set once, so that a piece costs an address add and a cp.async (the walk's last chunk, when
// shorter, goes through wgmma_copy_rows).
template <class Element, int Cols>
struct WholeChunkCopies {
  static constexpr int kVectorsPerRow = Cols / 8;
  static constexpr int kRowsPerPass = 128 / kVectorsPerRow;
  const char* source;   // the thread's first piece of the current chunk
  int64_t pass_bytes;   // kRowsPerPass rows
  int64_t chunk_bytes;  // 64 rows
  uint32_t target;      // the first piece's byte offset in a stage's tile
  __device__ __forceinline__ WholeChunkCopies(const Element* base, int64_t token_stride, int64_t t0, int ptid) {
    const int col = (ptid % kVectorsPerRow) * 8;
    const int row0 = ptid / kVectorsPerRow;
    source = reinterpret_cast<const char*>(base + (t0 + row0) * token_stride + col);
    pass_bytes = kRowsPerPass * token_stride * static_cast<int64_t>(sizeof(Element));
    chunk_bytes = 64 * token_stride * static_cast<int64_t>(sizeof(Element));
    target = (col / 64) * (64 * 128) + swizzled_offset(row0, col % 64);
  }
  __device__ __forceinline__ void copy(uint32_t tile) const {
    const char* from = source;
#pragma unroll
    for (int pass = 0; pass < 64 / kRowsPerPass; ++pass) {
      copy_16_bytes_async(tile + target + pass * kRowsPerPass * 128, from, true);
      from += pass_bytes;
    }
  }
  __device__ __forceinline__ void next_chunk() { source += chunk_bytes; }
};

template <class Traits>
__device__ __forceinline__ void wgmma_chunk_produce(const ChunkParams& p, const WgmmaChunkWalk& w,
                                                    typename Traits::SharedStorage& ss, int ptid) {
  using namespace cute;
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kValueBlock = Traits::kValueBlock;
  Tensor sQ = make_tensor(make_smem_ptr(ss.q), typename Traits::LayoutQK{});  // (token, d, stage)
  Tensor sK = make_tensor(make_smem_ptr(ss.k), typename Traits::LayoutQK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v), typename Traits::LayoutV{});  // (e, token, stage)
  const auto* q_base = static_cast<const Element*>(p.q.data) + w.b * p.q.batch + w.h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + w.b * p.k.batch + w.h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + w.b * p.v.batch + w.h * p.v.head +
                       static_cast<int64_t>(w.slice) * kValueBlock;
  const bool vector_access = p.vector_access != 0;
  constexpr int kBlockBytes = 64 * 128;  // 64 rows of 64 columns
  constexpr int kQkStageBytes = 64 * kHeadDim * 2;
  constexpr int kVStageBytes = 64 * kValueBlock * 2;
  const uint32_t q_tiles = shared_address(ss.q);
  const uint32_t k_tiles = shared_address(ss.k);
  const uint32_t v_tiles = shared_address(ss.v);
  // Whole chunks' copies from hoisted addresses where the producer's registers hold them (at D = 128 with value blocks
  // of 64 its 32 registers would spill them).
  constexpr bool kWholeChunkCopies = Traits::kProducerRegisters >= 40;
  WholeChunkCopies<Element, kHeadDim> q_copies(q_base, p.q.token, w.segment_begin, ptid);
  WholeChunkCopies<Element, kHeadDim> k_copies(k_base, p.k.token, w.segment_begin, ptid);
  WholeChunkCopies<Element, kValueBlock> v_copies(v_base, p.v.token, w.segment_begin, ptid);
  int stage = 0;
  uint32_t phase = 0;  // (chunk / kStages) % 2: the parity of the stage's barrier phases for this chunk
#pragma unroll 1
  for (int64_t chunk = 0; chunk < w.chunks; ++chunk) {
    // The ring is full: wait for the stage's release by the chunk kStages before this one.
    if (chunk >= Traits::kStages) fmha_sm90::barrier_wait(&ss.empty[stage], phase ^ 1u);
    const int64_t t0 = w.chunk_begin(chunk);
    if (kWholeChunkCopies && vector_access && w.chunk_length(chunk) == 64) {
      if (!w.state_only) q_copies.copy(q_tiles + stage * kQkStageBytes);
      k_copies.copy(k_tiles + stage * kQkStageBytes);
      v_copies.copy(v_tiles + stage * kVStageBytes);
    } else {
      if (!w.state_only) {
        wgmma_copy_rows<Element, kHeadDim>(
            q_tiles + stage * kQkStageBytes, kBlockBytes,
            [&](int row, int col) { return raw_pointer_cast(&sQ(row, col, stage)); }, q_base, p.q.token, t0, w.tokens,
            vector_access, ptid);
      }
      wgmma_copy_rows<Element, kHeadDim>(
          k_tiles + stage * kQkStageBytes, kBlockBytes,
          [&](int row, int col) { return raw_pointer_cast(&sK(row, col, stage)); }, k_base, p.k.token, t0, w.tokens,
          vector_access, ptid);
      wgmma_copy_rows<Element, kValueBlock>(
          v_tiles + stage * kVStageBytes, kBlockBytes,
          [&](int row, int col) { return raw_pointer_cast(&sV(col, row, stage)); }, v_base, p.v.token, t0, w.tokens,
          vector_access, ptid);
    }
    if constexpr (kWholeChunkCopies) {
      q_copies.next_chunk();
      k_copies.next_chunk();
      v_copies.next_chunk();
    }
    if (vector_access) {
      // Arrives once this thread's copies so far have landed; the producer goes on to the next chunk at once.
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(&ss.full[stage]))
                   : "memory");
    } else {
      fmha_sm90::fence_generic_to_async_shared();
      fmha_sm90::barrier_arrive(&ss.full[stage]);
    }
    if (++stage == Traits::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  commit_async_copies();
  wait_async_copies<0>();  // nothing in flight when the thread leaves
}

}  // namespace attnkit::cuda::retention
