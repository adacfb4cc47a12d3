// The query side of the parallel form's backward (retention_parallel_backward_common.cuh has the math):
// the row-terms launch (1/n_t and c_t per query row) and the dQ launch, one kernel with the role a runtime
// flag. One CTA of 4 warps owns one (batch, head, 64 query rows); warp w holds rows 16w..16w+15 with its
// Q and dO rows in shared memory, and walks the key blocks (K and V double buffered with cp.async):
//   S  = Q K^T                     (Dk/16 MMA k-steps; on accumulators, times scale D_tm)
//   dP = dO V^T                    (Dv/16 k-steps)
//   row terms: a_t += |s_tm|, pull_t += dp_tm s_tm, summed over the quad's lanes at the end;
//   dQ:        ds'_tm = (dp_tm / n_t - sign(s_tm) c_t) scale D_tm, packed to 16 bits in registers as
//              the A operand of dQ += ds' K (K read transposed with ldmatrix.trans).
// With gamma only key blocks up to the query block are visited (heavy query blocks launch first) and the
// warps skip the key tiles above their rows on the diagonal block.
//
// Work per (query block, key block): 2*64*64*(Dk + Dv) for S and dP, plus 2*64*64*Dk for dQ.
// Shared memory: Q [64][Dk+8], K [2][64][Dk+8], dO [64][Dv+8], V [2][64][Dv+8] (16-bit): 104 KiB at
// Dk = Dv = 128. Registers: S, dP (32 fp32 each) and the dQ accumulators (Dk/2 fp32).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_chunk_kernel.cuh"
#include "cuda/retention/retention_fragments.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_normalized_kernel.cuh"
#include "cuda/retention/retention_parallel_backward_common.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim>
__global__ void __launch_bounds__(ParallelBackwardTraits<Element, HeadDim>::kThreads)
    retention_parallel_query_backward_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = ParallelBackwardTraits<Element, HeadDim>;
  constexpr int kBlock = Traits::kBlock;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kDkTiles = HeadDim / 8;
  const int dv = p.value_columns;
  const int v_pitch = Traits::value_pitch(dv);

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* q_tile = reinterpret_cast<Element*>(shared_bytes);
  Element* k_tiles = q_tile + Traits::kQkTile;
  Element* do_tile = k_tiles + 2 * Traits::kQkTile;
  Element* v_tiles = do_tile + kBlock * v_pitch;
  const int v_tile_elements = kBlock * v_pitch;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int quad = lane % 4;
  const bool row_terms_role = p.backward_role == kRowTermsRole;

  // CTA order: query blocks from the last (heaviest with gamma) down, then (batch, head).
  const int64_t tokens = p.tokens;
  const int64_t query_blocks = (tokens + kBlock - 1) / kBlock;
  const int64_t cta = blockIdx.x;
  const int64_t query_block = query_blocks - 1 - cta % query_blocks;
  const int64_t head_index = cta / query_blocks;
  const int h = static_cast<int>(head_index % p.heads);
  const int64_t b = head_index / p.heads;

  const float log2_gamma = head_log2_gamma(p, h);
  const float ln_gamma = log2_gamma * 0.69314718055994530942f;
  const bool decay_matrix = p.decay.data != nullptr;
  const int64_t keys = decay_matrix ? p.tokens_k : tokens;
  const int64_t last_key_block = decay_matrix ? (keys + kBlock - 1) / kBlock - 1 : query_block;
  const bool vector_access = p.vector_access != 0;

  const auto* q_base = static_cast<const Element*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + b * p.k.batch + h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + b * p.v.batch + h * p.v.head;
  const auto* do_base = static_cast<const Element*>(p.grad_out.data) + b * p.grad_out.batch + h * p.grad_out.head;

  const int64_t q0 = query_block * kBlock;
  load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(q_tile, q_base, p.q.token, q0, tokens, vector_access);
  load_rows_of_width<Element, Traits::kThreads>(do_tile, v_pitch, do_base, p.grad_out.token, q0, tokens, dv,
                                                vector_access);
  auto load_keys = [&](int64_t key_block, int stage) {
    const int64_t k0 = key_block * kBlock;
    load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(k_tiles + stage * Traits::kQkTile, k_base, p.k.token, k0,
                                                            keys, vector_access);
    load_rows_of_width<Element, Traits::kThreads>(v_tiles + stage * v_tile_elements, v_pitch, v_base, p.v.token, k0,
                                                  keys, dv, vector_access);
  };
  if (last_key_block >= 0) load_keys(0, 0);
  commit_async_copies();

  // The thread's two query rows, their score factors and (dQ) their row terms 1/n_t and c_t.
  const int64_t row_lo = q0 + warp * 16 + g;
  float row_factor[2], inverse_norm[2] = {1.0f, 1.0f}, pull_factor[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = row_lo + 8 * half;
    row_factor[half] = query_row_factor(decay_matrix, p.scale, ln_gamma, i);
    if (!row_terms_role && p.row_terms != nullptr && i < tokens) {
      const float2 terms = reinterpret_cast<const float2*>(p.row_terms)[head_index * tokens + i];
      inverse_norm[half] = terms.x;
      pull_factor[half] = terms.y;
    }
  }
  const char* decay_rows = decay_matrix ? static_cast<const char*>(p.decay.data) : nullptr;
  if (decay_matrix) decay_rows += h * p.decay.head * (p.decay.f32 ? 4 : static_cast<int64_t>(sizeof(Element)));

  float grad_q[kDkTiles][4];
#pragma unroll
  for (int nt = 0; nt < kDkTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) grad_q[nt][e] = 0.0f;
  float abs_sum[2] = {0.0f, 0.0f}, pull[2] = {0.0f, 0.0f};

  for (int64_t key_block = 0; key_block <= last_key_block; ++key_block) {
    const int stage = static_cast<int>(key_block & 1);
    wait_async_copies<0>();
    __syncthreads();  // this block's K, V (and Q, dO) visible; the other stage is free
    if (key_block + 1 <= last_key_block) load_keys(key_block + 1, stage ^ 1);
    commit_async_copies();
    const Element* k_tile = k_tiles + stage * Traits::kQkTile;
    const Element* v_tile = v_tiles + stage * v_tile_elements;
    const bool diagonal = !decay_matrix && key_block == query_block;
    const int64_t k0 = key_block * kBlock;

    float scores[8][4], score_grads[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) scores[nt][e] = score_grads[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HeadDim / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows(q_tile, kQkPitch, warp * 16, ks * 16, lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (!diagonal || np <= warp) {
          uint32_t bk[4];
          ldmatrix_x4(bk, b_rows_nk(k_tile, kQkPitch, np * 16, ks * 16, lane));
          mma_16816<Element>(scores[2 * np], a, bk[0], bk[1]);
          mma_16816<Element>(scores[2 * np + 1], a, bk[2], bk[3]);
        }
      }
    }
    for (int ks = 0; ks < dv / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows(do_tile, v_pitch, warp * 16, ks * 16, lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (!diagonal || np <= warp) {
          uint32_t bv[4];
          ldmatrix_x4(bv, b_rows_nk(v_tile, v_pitch, np * 16, ks * 16, lane));
          mma_16816<Element>(score_grads[2 * np], a, bv[0], bv[1]);
          mma_16816<Element>(score_grads[2 * np + 1], a, bv[2], bv[3]);
        }
      }
    }
    // Decay weights and causal mask; keys past the sequence are zero rows of K and V.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const int64_t i = row_lo + 8 * half;
        const int64_t j = k0 + nt * 8 + 2 * quad + e % 2;
        float weight;
        if (decay_matrix) {
          weight = i < tokens && j < keys ? decay_entry<Element>(decay_rows, p.decay, i, j) : 0.0f;
        } else {
          weight = j <= i ? decay_power(log2_gamma, static_cast<float>(i - j)) : 0.0f;
        }
        weight *= row_factor[half];
        const float s = weight != 0.0f ? scores[nt][e] * weight : 0.0f;
        if (row_terms_role) {
          abs_sum[half] += fabsf(s);
          pull[half] += score_grads[nt][e] * s;
        } else {
          scores[nt][e] = (score_grads[nt][e] * inverse_norm[half] - sign_of(s) * pull_factor[half]) * weight;
        }
      }
    if (row_terms_role) continue;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (!diagonal || ks <= warp) {
        const uint32_t a[4] = {pack_pair<Element>(scores[2 * ks][0], scores[2 * ks][1]),
                               pack_pair<Element>(scores[2 * ks][2], scores[2 * ks][3]),
                               pack_pair<Element>(scores[2 * ks + 1][0], scores[2 * ks + 1][1]),
                               pack_pair<Element>(scores[2 * ks + 1][2], scores[2 * ks + 1][3])};
#pragma unroll
        for (int np = 0; np < kDkTiles / 2; ++np) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, b_rows_kn(k_tile, kQkPitch, ks * 16, np * 16, lane));
          mma_16816<Element>(grad_q[2 * np], a, bk[0], bk[1]);
          mma_16816<Element>(grad_q[2 * np + 1], a, bk[2], bk[3]);
        }
      }
    }
  }

  if (row_terms_role) {
    // The four lanes of a quad share their rows: their partial sums make the row's.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 1);
      abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 2);
      pull[half] += __shfl_xor_sync(0xffffffffu, pull[half], 1);
      pull[half] += __shfl_xor_sync(0xffffffffu, pull[half], 2);
      const int64_t i = row_lo + 8 * half;
      if (quad != 0 || i >= tokens) continue;
      const float norm = fmaxf(abs_sum[half], 1.0f);
      const float c = abs_sum[half] > 1.0f ? pull[half] / (norm * norm) : 0.0f;
      reinterpret_cast<float2*>(p.row_terms)[head_index * tokens + i] = make_float2(1.0f / norm, c);
    }
    return;
  }
  auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + b * p.out.batch + h * p.out.head;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = row_lo + 8 * half;
    if (i >= tokens) continue;
    Element* row = out_base + i * p.out.token;
#pragma unroll
    for (int nt = 0; nt < kDkTiles; ++nt) {
      store_pair(row, nt * 8 + 2 * quad, pack_pair<Element>(grad_q[nt][2 * half], grad_q[nt][2 * half + 1]),
                 vector_access);
    }
  }
}

}  // namespace attnkit::cuda::retention
