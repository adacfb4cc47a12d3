// The key side of the parallel form's backward (retention_parallel_backward_common.cuh has the math): the
// dK launch and the dV launch, one kernel with the role a runtime flag. One CTA of 4 warps owns one (batch,
// head, 64 keys) -- for dV also one value slice, Dk columns wide (as many as the accumulators hold) when Dv
// is a multiple of Dk, else 64; warp w holds keys 16w..16w+15 with its K (and V) rows in shared memory, and
// walks the query blocks with Q, dO and the query rows' terms (1/n_t, c_t and the score factor) double
// buffered. Everything is computed transposed, keys as rows:
//   S^T  = K Q^T                   (Dk/16 MMA k-steps; on accumulators, times scale D_tm)
//   dK:  dP^T = V dO^T (Dv/16 k-steps), ds'^T = (dp / n_t - sign(s) c_t) scale D_tm, dK += ds'^T Q;
//   dV:  P^T = S^T / n_t,  dV += P^T dO (the slice's columns of dO);
// the left operands go from accumulators to 16-bit A fragments in registers, Q and dO are read
// transposed with ldmatrix.trans. With gamma only query blocks from the key block on are visited (heavy key
// blocks launch first) and the warps skip the query tiles left of their keys on the diagonal block.
//
// Work per (key block, query block): 2*64*64*Dk for S^T, plus 2*64*64*(Dv + Dk) for dK or 2*64*64*(slice
// width) for a dV slice. Shared memory: K [64][Dk+8], Q [2][64][Dk+8], V [64][Dv+8], dO [2][64][Dv+8]
// (16-bit; dV fills the slice's columns of the dO tiles and no V), row terms [2][64][4] fp32: 106 KiB at
// Dk = Dv = 128. Registers: S^T, dP^T (32 fp32 each) and the accumulators (Dk/2 fp32).
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
    retention_parallel_key_backward_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = ParallelBackwardTraits<Element, HeadDim>;
  constexpr int kBlock = Traits::kBlock;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kDkTiles = HeadDim / 8;
  constexpr int kTermFloats = Traits::kRowTermFloats;
  const int dv = p.value_columns;
  const int v_pitch = Traits::value_pitch(dv);
  const bool grad_v_role = p.backward_role == kGradVRole;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* k_tile = reinterpret_cast<Element*>(shared_bytes);
  Element* q_tiles = k_tile + Traits::kQkTile;
  Element* v_tile = q_tiles + 2 * Traits::kQkTile;
  Element* do_tiles = v_tile + kBlock * v_pitch;
  float* row_terms = reinterpret_cast<float*>(do_tiles + 2 * kBlock * v_pitch);
  const int do_tile_elements = kBlock * v_pitch;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int quad = lane % 4;

  // CTA order: value slice fastest, then key blocks from the first (heaviest with gamma) up, then (batch, head).
  const int64_t tokens = p.tokens;
  const bool decay_matrix = p.decay.data != nullptr;
  const int64_t keys = decay_matrix ? p.tokens_k : tokens;
  const int64_t key_blocks = (keys + kBlock - 1) / kBlock;
  const int64_t query_blocks = (tokens + kBlock - 1) / kBlock;
  const int64_t cta = blockIdx.x;
  const int slice = static_cast<int>(cta % p.dv_slices);
  const int64_t rest = cta / p.dv_slices;
  const int64_t key_block = rest % key_blocks;
  const int64_t head_index = rest / key_blocks;
  const int h = static_cast<int>(head_index % p.heads);
  const int64_t b = head_index / p.heads;

  const float log2_gamma = head_log2_gamma(p, h);
  const float ln_gamma = log2_gamma * 0.69314718055994530942f;
  const int64_t first_query_block = decay_matrix ? 0 : key_block;
  const bool vector_access = p.vector_access != 0;
  // dK reads all Dv columns of V and dO; dV reads its slice of dO only (64 columns, or Dk when Dv is a multiple
  // of it: as many as the accumulators hold).
  const int value_columns = grad_v_role ? dv / p.dv_slices : dv;
  const int64_t value_offset = grad_v_role ? static_cast<int64_t>(slice) * value_columns : 0;

  const auto* q_base = static_cast<const Element*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + b * p.k.batch + h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + b * p.v.batch + h * p.v.head;
  const auto* do_base =
      static_cast<const Element*>(p.grad_out.data) + b * p.grad_out.batch + h * p.grad_out.head + value_offset;

  const int64_t k0 = key_block * kBlock;
  load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(k_tile, k_base, p.k.token, k0, keys, vector_access);
  if (!grad_v_role) {
    load_rows_of_width<Element, Traits::kThreads>(v_tile, v_pitch, v_base, p.v.token, k0, keys, dv, vector_access);
  }
  // Q, dO and the row terms of one query block; the terms with plain stores, visible after the next barrier.
  auto load_queries = [&](int64_t query_block, int stage) {
    const int64_t q0 = query_block * kBlock;
    load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(q_tiles + stage * Traits::kQkTile, q_base, p.q.token, q0,
                                                            tokens, vector_access);
    load_rows_of_width<Element, Traits::kThreads>(do_tiles + stage * do_tile_elements, v_pitch, do_base,
                                                  p.grad_out.token, q0, tokens, value_columns, vector_access);
    const int r = static_cast<int>(threadIdx.x);
    if (r < kBlock) {
      const int64_t t = q0 + r;
      float* terms = row_terms + (stage * kBlock + r) * kTermFloats;
      float2 norm_terms = make_float2(1.0f, 0.0f);
      if (p.row_terms != nullptr && t < tokens) {
        norm_terms = reinterpret_cast<const float2*>(p.row_terms)[head_index * tokens + t];
      }
      terms[0] = norm_terms.x;
      terms[1] = norm_terms.y;
      terms[2] = t < tokens ? query_row_factor(decay_matrix, p.scale, ln_gamma, t) : 0.0f;
    }
  };
  if (first_query_block < query_blocks) load_queries(first_query_block, 0);
  commit_async_copies();

  const char* decay_rows = decay_matrix ? static_cast<const char*>(p.decay.data) : nullptr;
  if (decay_matrix) decay_rows += h * p.decay.head * (p.decay.f32 ? 4 : static_cast<int64_t>(sizeof(Element)));
  const int64_t key_lo = k0 + warp * 16 + g;  // the thread's two keys: key_lo and key_lo + 8

  float grad[kDkTiles][4];
#pragma unroll
  for (int nt = 0; nt < kDkTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) grad[nt][e] = 0.0f;

  for (int64_t query_block = first_query_block; query_block < query_blocks; ++query_block) {
    const int stage = static_cast<int>((query_block - first_query_block) & 1);
    wait_async_copies<0>();
    __syncthreads();  // this block's Q, dO, terms (and K, V) visible; the other stage is free
    if (query_block + 1 < query_blocks) load_queries(query_block + 1, stage ^ 1);
    commit_async_copies();
    const Element* q_tile = q_tiles + stage * Traits::kQkTile;
    const Element* do_tile = do_tiles + stage * do_tile_elements;
    const float* terms = row_terms + stage * kBlock * kTermFloats;
    const bool diagonal = !decay_matrix && query_block == key_block;
    const int64_t q0 = query_block * kBlock;

    float scores[8][4], score_grads[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) scores[nt][e] = score_grads[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HeadDim / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows(k_tile, kQkPitch, warp * 16, ks * 16, lane));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        if (!diagonal || np >= warp) {
          uint32_t bq[4];
          ldmatrix_x4(bq, b_rows_nk(q_tile, kQkPitch, np * 16, ks * 16, lane));
          mma_16816<Element>(scores[2 * np], a, bq[0], bq[1]);
          mma_16816<Element>(scores[2 * np + 1], a, bq[2], bq[3]);
        }
      }
    }
    if (!grad_v_role) {
      for (int ks = 0; ks < dv / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, a_rows(v_tile, v_pitch, warp * 16, ks * 16, lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (!diagonal || np >= warp) {
            uint32_t bo[4];
            ldmatrix_x4(bo, b_rows_nk(do_tile, v_pitch, np * 16, ks * 16, lane));
            mma_16816<Element>(score_grads[2 * np], a, bo[0], bo[1]);
            mma_16816<Element>(score_grads[2 * np + 1], a, bo[2], bo[3]);
          }
        }
      }
    }
    // Element (nt, e): key key_lo + 8*(e/2), query column nt*8 + 2*quad + e%2 of the block. Queries past the
    // sequence have a zero score factor; keys past it are zero rows of K and V.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = key_lo + 8 * (e / 2);
        const int column = nt * 8 + 2 * quad + e % 2;
        const int64_t t = q0 + column;
        const float* query_terms = terms + column * kTermFloats;
        float weight;
        if (decay_matrix) {
          weight = t < tokens && m < keys ? decay_entry<Element>(decay_rows, p.decay, t, m) : 0.0f;
        } else {
          weight = m <= t ? decay_power(log2_gamma, static_cast<float>(t - m)) : 0.0f;
        }
        weight *= query_terms[2];
        const float s = weight != 0.0f ? scores[nt][e] * weight : 0.0f;
        if (grad_v_role) {
          scores[nt][e] = s * query_terms[0];
        } else {
          scores[nt][e] = (score_grads[nt][e] * query_terms[0] - sign_of(s) * query_terms[1]) * weight;
        }
      }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (!diagonal || ks >= warp) {
        const uint32_t a[4] = {pack_pair<Element>(scores[2 * ks][0], scores[2 * ks][1]),
                               pack_pair<Element>(scores[2 * ks][2], scores[2 * ks][3]),
                               pack_pair<Element>(scores[2 * ks + 1][0], scores[2 * ks + 1][1]),
                               pack_pair<Element>(scores[2 * ks + 1][2], scores[2 * ks + 1][3])};
        if (grad_v_role) {
#pragma unroll
          for (int np = 0; np < kDkTiles / 2; ++np) {
            if (np < value_columns / 16) {
              uint32_t bo[4];
              ldmatrix_x4_trans(bo, b_rows_kn(do_tile, v_pitch, ks * 16, np * 16, lane));
              mma_16816<Element>(grad[2 * np], a, bo[0], bo[1]);
              mma_16816<Element>(grad[2 * np + 1], a, bo[2], bo[3]);
            }
          }
        } else {
#pragma unroll
          for (int np = 0; np < kDkTiles / 2; ++np) {
            uint32_t bq[4];
            ldmatrix_x4_trans(bq, b_rows_kn(q_tile, kQkPitch, ks * 16, np * 16, lane));
            mma_16816<Element>(grad[2 * np], a, bq[0], bq[1]);
            mma_16816<Element>(grad[2 * np + 1], a, bq[2], bq[3]);
          }
        }
      }
    }
  }

  // dK: Dk columns; dV: the slice's columns.
  auto* out_base =
      static_cast<Element*>(const_cast<void*>(p.out.data)) + b * p.out.batch + h * p.out.head + value_offset;
  const int out_tiles = grad_v_role ? value_columns / 8 : kDkTiles;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t m = key_lo + 8 * half;
    if (m >= keys) continue;
    Element* row = out_base + m * p.out.token;
#pragma unroll
    for (int nt = 0; nt < kDkTiles; ++nt) {
      if (nt < out_tiles) {
        store_pair(row, nt * 8 + 2 * quad, pack_pair<Element>(grad[nt][2 * half], grad[nt][2 * half + 1]),
                   vector_access);
      }
    }
  }
}

}  // namespace attnkit::cuda::retention
