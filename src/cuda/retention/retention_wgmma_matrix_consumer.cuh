// A consumer warpgroup of the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh): 64 query rows of the
// CTA's 128 (warpgroup g: rows 64 g ..), E value columns.
//
// Per key block the tile map marks nonzero (the producer's walk): read the thread's 32 entries of the stage's matrix
// tile (its accumulator positions); issue S = Q K^T (m64n64, both operands in shared memory) and wait for it; weigh
// the scores, s = scale * S * D (0 where D is 0, whatever S is; summing |s| per row for RetNet's normalisation), pack
// them to 16 bits in the A registers of P V, issue O += P V (m64nE, V MN-major), wait, and release the stage: held for
// one block's products only, so the producer refills it while the other warpgroup's products run. At the end the rows
// are divided by max(sum |s|, 1) where normalisation asks for it and stored in 16 bits. A thread's accumulator value v
// of an m64nN tile is row 16 warp + lane / 4 + 8 ((v / 2) % 2), column 8 (v / 4) + 2 (lane % 4) + v % 2.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/common/cluster_sync.cuh"
#include "cuda/common/opaque.cuh"
#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/fmha_sm90/fmha_sm90_gmma.cuh"
#include "cuda/fmha_sm90/fmha_sm90_sync.cuh"
#include "cuda/retention/retention_params.hpp"
#include "cuda/retention/retention_wgmma_matrix_producer.cuh"

namespace attnkit::cuda::retention {

// The thread's 32 entries of a matrix tile (the stage at shared address `tile`, in the layout of its TMA boxes:
// retention_wgmma_matrix_traits.cuh), rows row_lo and row_lo + 8 of it, in accumulator order: value v at row row_lo + 8
// ((v / 2) % 2), key 8 (v / 4) + 2 (lane % 4) + v % 2. 16-bit entries are of the inputs' type.
template <class Element>
__device__ __forceinline__ void load_matrix_entries(uint32_t tile, bool f32, int row_lo, int lane, float (&d)[32]) {
  const uint32_t swizzle = static_cast<uint32_t>(row_lo & 7);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t row = tile + static_cast<uint32_t>((row_lo + 8 * half) * 128);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float x, y;
      if (f32) {
        // Keys 8k + 2 (lane % 4), + 1: the half of keys k / 4, piece 2 (k % 4) + (lane % 4) / 2, bytes 8 (lane % 2).
        const uint32_t piece = static_cast<uint32_t>(2 * (k % 4) + (lane & 3) / 2);
        asm volatile(
            "ld.shared.v2.f32 {%0, %1}, [%2];\n"
            : "=f"(x), "=f"(y)
            : "r"(row + static_cast<uint32_t>((k / 4) * (64 * 256)) + ((piece ^ swizzle) << 4) + 8u * (lane & 1)));
      } else {
        // Piece k, bytes 4 (lane % 4) of it.
        uint32_t pair;
        asm volatile("ld.shared.b32 %0, [%1];\n"
                     : "=r"(pair)
                     : "r"(row + ((static_cast<uint32_t>(k) ^ swizzle) << 4) + 4u * (lane & 3)));
        x = fmha::unpack_value<Element>(pair & 0xffffu);
        y = fmha::unpack_value<Element>(pair >> 16);
      }
      d[4 * k + 2 * half] = x;
      d[4 * k + 2 * half + 1] = y;
    }
  }
}

template <class Traits>
__device__ __forceinline__ void wgmma_matrix_consume(const ChunkParams& p, const MatrixWalk& w,
                                                     typename Traits::SharedStorage& ss, uint32_t cluster, int group,
                                                     int wg_tid) {
  using namespace cute;
  using Element = typename Traits::Element;
  using fmha_sm90::barrier_wait;
  using fmha_sm90::issue_gemm;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kValueBlock = Traits::kValueBlock;
  constexpr int kStages = Traits::kStages;
  typename Traits::MmaScores mma_scores;
  typename Traits::MmaValues mma_values;
  auto thread_scores = mma_scores.get_thread_slice(wg_tid);
  auto thread_values = mma_values.get_thread_slice(wg_tid);
  Tensor acc_s = partition_fragment_C(mma_scores, Shape<_64, _64>{});
  Tensor acc_o = partition_fragment_C(mma_values, Shape<_64, Int<kValueBlock>>{});
  Tensor tOrP = make_tensor<Element>(partition_shape_A(mma_values, Shape<_64, _64>{}));
  static_assert(decltype(size(tOrP))::value == decltype(size(acc_s))::value, "P fills the A fragment");
  static_assert(decltype(size(acc_s))::value == 32, "one m64n64 accumulator");
  Tensor sQ = make_tensor(make_smem_ptr(ss.q), typename Traits::LayoutQ{});
  Tensor sQg = local_tile(sQ, Shape<_64, Int<kHeadDim>>{}, make_coord(group, _0{}));
  Tensor tSrQ = thread_scores.partition_fragment_A(sQg);  // (MMA, 1, K) descriptors

  const int lane = wg_tid % 32;
  const int row_lo = 16 * (wg_tid / 32) + lane / 4;  // the thread's rows of the warpgroup's 64: row_lo, row_lo + 8
  const bool f32 = p.decay.f32 != 0;
  const bool normalize = p.decay.normalize != 0;
  const float scale = p.scale;
  float abs_sum[2] = {0.0f, 0.0f};
  clear(acc_o);
  barrier_wait(&ss.q_full, 0);

  int uses = 0;
  for_each_nonzero_block(matrix_map_row(p, w), w.blocks, [&](int) {
    const int stage = uses % kStages;
    barrier_wait(&ss.full[stage], (uses / kStages) & 1);
    float d[32];
    load_matrix_entries<Element>(shared_address(ss.matrix[stage]) + static_cast<uint32_t>(64 * group * 128), f32,
                                 row_lo, lane, d);
    fmha_sm90::fence_generic_to_async_shared();  // the producer's copies of K and V, for this thread's wgmma reads
    Tensor sK = make_tensor(make_smem_ptr(opaque(&ss.k[stage][0])), typename Traits::LayoutKStage{});  // (key, d)
    Tensor tSrK = thread_scores.partition_fragment_B(sK);
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    issue_gemm<false>(mma_scores, tSrQ, tSrK, acc_s);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_s);
    CUTE_UNROLL
    for (int v = 0; v < 32; ++v) {
      const float s = d[v] != 0.0f ? acc_s(v) * scale * d[v] : 0.0f;  // a zero entry drops the key, whatever S is
      abs_sum[(v >> 1) & 1] += fabsf(s);
      acc_s(v) = s;
    }
    fmha_sm90::pack_accumulator<Element>(acc_s, tOrP);
    warpgroup_fence_operand(tOrP);
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    Tensor sV = make_tensor(make_smem_ptr(opaque(&ss.v[stage][0])), typename Traits::LayoutVStage{});  // (e, key)
    Tensor tOrV = thread_values.partition_fragment_B(sV);
    issue_gemm<true>(mma_values, tOrP, tOrV, acc_o);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_o);
    // The stage goes back at once, to every CTA's producer of the cluster (each writes a share of its matrix tile):
    // they refill it while the other warpgroup's products run. One arrival a thread: one a warp (after __syncwarp,
    // from lane 0) measured 0.7-3.9 % slower on an H200 (docs/perf.md, retention twenty-fifth step).
    for (uint32_t rank = 0; rank < cluster; ++rank) cluster_barrier_arrive(&ss.empty[stage], rank);
    ++uses;
  });

  // The rows' normaliser, over the four lanes of a quad (they share their rows).
  float inverse[2] = {1.0f, 1.0f};
  if (normalize) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 1);
      abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 2);
      inverse[half] = 1.0f / fmaxf(abs_sum[half], 1.0f);
    }
  }
  auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + w.b * p.out.batch + w.h * p.out.head +
                   static_cast<int64_t>(w.slice) * kValueBlock + 2 * (lane % 4);
  const int64_t row0 = w.q0 + 64 * group + row_lo;
  CUTE_UNROLL
  for (int pair = 0; pair < size(acc_o) / 2; ++pair) {
    const int half = pair & 1;
    const int64_t row = row0 + 8 * half;
    if (row < p.tokens) {
      const uint32_t bits =
          fmha::pack_pair<Element>(acc_o(2 * pair) * inverse[half], acc_o(2 * pair + 1) * inverse[half]);
      *reinterpret_cast<uint32_t*>(out_base + row * p.out.token + 8 * (pair >> 1)) = bits;
    }
  }
}

}  // namespace attnkit::cuda::retention
