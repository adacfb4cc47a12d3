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
// warps skip the key tiles above their rows on the diagonal block. With a decay matrix every key block is
// visited: its 64x64 tile of the matrix is staged in shared memory with K and V (retention_decay_tile.cuh), and a
// warp whose 16 rows of it are all zero skips the block pair (the upper triangle of a causal matrix); after an
// all-zero tile the next block's K and V are fetched only if its tile turns out nonzero (retention_decay_tile.cuh).
// The CTA order puts the batch fastest, so the B CTAs that read the same rows of a head's matrix run together.
// The grouped instances (Members = kDecayMatrixMembers, the matrix form; retention_parallel_backward_common.cuh) run
// Members batches of one (head, query block) per CTA, 4 warps and one set of the tiles below each, and stage each
// matrix tile once for all of them, in a single stage: the next tile is staged after the barrier that follows the
// weights, during the dQ MMAs (the row terms have none after the weights).
//
// Work per (query block, key block): 2*64*64*(Dk + Dv) for S and dP, plus 2*64*64*Dk for dQ; with a matrix,
// the pairs whose warp strips are nonzero (for a causal matrix the pairs on and below the diagonal, as with
// gamma). Bytes with a matrix: each CTA reads its 64 rows of the head's matrix (64 * Tk * 4 or 2 bytes), DRAM
// about once per head (the B CTAs sharing them run together), the others from L2.
// Shared memory: Q [64][Dk+8], K [2][64][Dk+8], dO [64][Dv+8], V [2][64][Dv+8] (16-bit): 104 KiB at
// Dk = Dv = 128, plus two stages of the matrix's tile [64][72] with a matrix (36 KiB fp32, 18 KiB 16-bit); grouped,
// Members such sets and one stage of the tile. Registers: S, dP (32 fp32 each) and the dQ accumulators (Dk/2 fp32);
// ptxas 13 (SM90a): 219 at Dk = 128, 162 at 64 (4 warps), grouped 249 and 238 (8 warps), no spills.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_decay_tile.cuh"
#include "cuda/retention/retention_parallel_backward_common.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int Members>
__global__ void __launch_bounds__(ParallelBackwardTraits<Element, HeadDim, Members>::kThreads)
    retention_parallel_query_backward_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = ParallelBackwardTraits<Element, HeadDim, Members>;
  constexpr int kBlock = Traits::kBlock;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kDkTiles = Traits::kDkTiles;
  const int dv = p.value_columns;
  const int v_pitch = Traits::value_pitch(dv);

  // The thread's member (its 4 warps' batch) and its thread within the member (constants with one).
  const int member = Members == 1 ? 0 : static_cast<int>(threadIdx.x) / Traits::kMemberThreads;
  const int member_thread =
      Members == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % Traits::kMemberThreads;
  constexpr int kMemberThreads = Traits::kMemberThreads;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const auto tiles =
      parallel_backward_tiles<Traits, Element>(shared_bytes + member * Traits::member_shared_bytes(dv), v_pitch);
  // One member: two stages of the matrix's tile after its tiles; several: one stage after all the members' tiles.
  unsigned char* decay_tiles = Members == 1 ? tiles.decay : shared_bytes + Traits::shared_bytes(dv);
  Element* q_tile = tiles.fixed_qk;
  Element* k_tiles = tiles.staged_qk;
  Element* do_tile = tiles.fixed_v;
  Element* v_tiles = tiles.staged_v;
  const int v_tile_elements = tiles.v_tile_elements;

  const WarpLane thread = warp_lane(member_thread);
  const int warp = thread.warp, lane = thread.lane, g = thread.g, quad = thread.quad;
  const bool row_terms_role = p.backward_role == kRowTermsRole;

  // CTA order: query blocks from the last (heaviest with gamma) down, then (batch, head); with a decay matrix
  // the batch first (the CTAs reading the same matrix rows together), then query blocks, then heads, and in the
  // grouped instances (the matrix form only) the batches Members to a CTA: a last, short group leaves its missing
  // members idle (they stage the matrix's tiles and meet the barriers, nothing else).
  const bool decay_matrix = Members > 1 || p.decay.data != nullptr;
  const int64_t tokens = p.tokens;
  const int64_t query_blocks = (tokens + kBlock - 1) / kBlock;
  int64_t rest = blockIdx.x;
  int64_t b = 0;
  bool member_active = true;
  if (Members > 1) {
    const int64_t groups = (static_cast<int64_t>(p.batches) + Members - 1) / Members;
    b = rest % groups * Members + member;
    member_active = b < p.batches;
    if (!member_active) b = 0;
    rest /= groups;
  } else if (decay_matrix) {
    b = rest % p.batches;
    rest /= p.batches;
  }
  const int64_t query_block = query_blocks - 1 - rest % query_blocks;
  rest /= query_blocks;
  const int h = static_cast<int>(rest % p.heads);
  if (!decay_matrix) b = rest / p.heads;
  const int64_t head_index = b * p.heads + h;  // of the row terms [B, H, Tq, 2]

  const int64_t keys = decay_matrix ? p.tokens_k : tokens;
  const auto head = parallel_backward_head<Element>(p, b, h);
  const float log2_gamma = head.log2_gamma;
  const int64_t last_key_block = decay_matrix ? (keys + kBlock - 1) / kBlock - 1 : query_block;
  const bool vector_access = p.vector_access != 0;

  const Element* q_base = head.q;
  const Element* k_base = head.k;
  const Element* v_base = head.v;
  const Element* do_base = head.grad_out;

  const int64_t q0 = query_block * kBlock;
  if (member_active) {
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(q_tile, q_base, p.q.token, q0, tokens, vector_access,
                                                          member_thread);
    load_rows_of_width<Element, kMemberThreads>(do_tile, v_pitch, do_base, p.grad_out.token, q0, tokens, dv,
                                                vector_access, member_thread);
  }
  // The member's K and V of a key block; with a matrix its tile (query rows q0.., keys k0..) separately, staged by
  // all the CTA's threads.
  auto load_key_operands = [&](int64_t key_block, int stage) {
    if (!member_active) return;
    const int64_t k0 = key_block * kBlock;
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(k_tiles + stage * Traits::kQkTile, k_base, p.k.token, k0,
                                                          keys, vector_access, member_thread);
    load_rows_of_width<Element, kMemberThreads>(v_tiles + stage * v_tile_elements, v_pitch, v_base, p.v.token, k0, keys,
                                                dv, vector_access, member_thread);
  };
  auto load_decay_tile = [&](int64_t key_block, int stage) {
    stage_decay_tile_of<Element, false, Traits::kThreads>(decay_tiles, stage, p.decay, h, static_cast<int>(query_block),
                                                          static_cast<int>(key_block), tokens, keys);
  };
  if (last_key_block >= 0) {
    load_key_operands(0, 0);
    if (decay_matrix) load_decay_tile(0, 0);
  }
  commit_async_copies();

  // The thread's two query rows, their score factors and (dQ) their row terms 1/n_t and c_t.
  const int64_t row_lo = q0 + warp * 16 + g;
  float row_factor[2], inverse_norm[2] = {1.0f, 1.0f}, pull_factor[2] = {0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = row_lo + 8 * half;
    row_factor[half] = query_row_factor(decay_matrix, p.scale, head.ln_gamma, i);
    if (!row_terms_role && p.row_terms != nullptr && i < tokens) {
      const float2 terms = reinterpret_cast<const float2*>(p.row_terms)[head_index * tokens + i];
      inverse_norm[half] = terms.x;
      pull_factor[half] = terms.y;
    }
  }

  float grad_q[kDkTiles][4];
  zero_tiles(grad_q);
  float abs_sum[2] = {0.0f, 0.0f}, pull[2] = {0.0f, 0.0f};

  bool operands_fetched = true;  // this block's K and V were fetched with its tile (always with gamma)
  for (int64_t key_block = 0; key_block <= last_key_block; ++key_block) {
    const int stage = static_cast<int>(key_block & 1);
    const bool has_next = key_block + 1 <= last_key_block;
    // A zero tile adds nothing to any sum or gradient; nor does a warp's all-zero 16 rows of a nonzero tile.
    if constexpr (Members > 1) {
      if (!begin_single_stage_decay_block<Element, false, Traits::kThreads>(
              decay_tiles, p.decay, key_block, stage, has_next, operands_fetched, load_key_operands)) {
        if (has_next) load_decay_tile(key_block + 1, 0);
        commit_async_copies();
        continue;
      }
    } else {
      if (!begin_decay_block<Element, false, Traits::kThreads>(decay_matrix, decay_tiles, p.decay, key_block, stage,
                                                               has_next, operands_fetched, load_key_operands,
                                                               load_decay_tile)) {
        continue;
      }
    }
    const int decay_stage = Members > 1 ? 0 : stage;
    const bool warp_active =
        member_active && (!decay_matrix || decay_strip_nonzero_of<Element, false>(decay_tiles, decay_stage,
                                                                                  p.decay.f32 != 0, warp, lane));
    if (Members == 1 && !warp_active) continue;
    const Element* k_tile = k_tiles + stage * Traits::kQkTile;
    const Element* v_tile = v_tiles + stage * v_tile_elements;
    const bool diagonal = !decay_matrix && key_block == query_block;
    const int64_t k0 = key_block * kBlock;

    // Key tiles above the warp's rows on the diagonal block are skipped.
    const auto visit = [&](int np) { return !diagonal || np <= warp; };
    float scores[8][4], score_grads[8][4];
    zero_tiles(scores);
    zero_tiles(score_grads);
    if (warp_active) {
#pragma unroll
      for (int ks = 0; ks < HeadDim / 16; ++ks) {
        mma_rows_k_step<Element>(scores, q_tile, kQkPitch, k_tile, kQkPitch, ks, warp, lane, visit);
      }
      for (int ks = 0; ks < dv / 16; ++ks) {
        mma_rows_k_step<Element>(score_grads, do_tile, v_pitch, v_tile, v_pitch, ks, warp, lane, visit);
      }
    }
    // Decay weights and causal mask; keys past the sequence are zero rows of K and V.
    const auto weigh = [&](int nt, int e, float decay) {
      const int half = e / 2;
      const float weight = decay * row_factor[half];
      const float s = weight != 0.0f ? scores[nt][e] * weight : 0.0f;
      if (row_terms_role) {
        abs_sum[half] += fabsf(s);
        pull[half] += score_grads[nt][e] * s;
      } else {
        scores[nt][e] = (score_grads[nt][e] * inverse_norm[half] - sign_of(s) * pull_factor[half]) * weight;
      }
    };
    if (warp_active) {
      weigh_query_rows<Element>(p, decay_matrix, decay_tiles, decay_stage, log2_gamma, warp, g, quad, row_lo, k0,
                                weigh);
    }
    if constexpr (Members > 1) {
      // Every warp is done with the tile: the next one goes to its stage while the last MMAs run.
      __syncthreads();
      if (has_next) load_decay_tile(key_block + 1, 0);
      commit_async_copies();
      if (!warp_active) continue;
    }
    if (row_terms_role) continue;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (visit(ks)) {
        uint32_t a[4];
        score_a_fragment<Element>(a, scores, ks);
        mma_kn_tile<Element>(grad_q, a, k_tile, kQkPitch, ks * 16, lane);
      }
    }
  }

  if (!member_active) return;
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
  Element* out_base = head_output_rows<Element>(p.out, b, h);
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
