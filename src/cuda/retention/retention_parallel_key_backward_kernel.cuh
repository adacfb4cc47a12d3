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
// blocks launch first) and the warps skip the query tiles left of their keys on the diagonal block. With a
// decay matrix every query block is visited: its 64x64 tile of the matrix (queries x the CTA's keys) is staged in
// shared memory with Q and dO (retention_decay_tile.cuh) and read transposed, and a warp whose 16 keys' column
// of it is all zero skips the block pair (for a causal matrix, the query blocks before the key block); after an
// all-zero tile the next block's Q, dO and terms are fetched only if its tile turns out nonzero
// (retention_decay_tile.cuh). The CTA order puts the value slice and then the batch fastest, so the CTAs that
// read the same columns of a head's matrix run together. The grouped instances (Members = kDecayMatrixMembers, the
// matrix form; retention_parallel_backward_common.cuh) run Members (batch, slice) pairs of one (head, key block)
// per CTA, 4 warps and one set of the tiles below each, and stage each matrix tile once for all of them, in a single
// stage: the next tile is staged after the barrier that follows the weights, during the dK (or dV) MMAs.
//
// Work per (key block, query block): 2*64*64*Dk for S^T, plus 2*64*64*(Dv + Dk) for dK or 2*64*64*(slice
// width) for a dV slice; with a matrix, the pairs whose warp strips are nonzero. Bytes with a matrix: each CTA
// reads the head's matrix columns of its keys (Tq * 64 * 4 or 2 bytes), DRAM about once per head.
// Shared memory: K [64][Dk+8], Q [2][64][Dk+8], V [64][Dv+8], dO [2][64][Dv+8] (16-bit; dV fills the slice's
// columns of the dO tiles and no V), row terms [2][64][4] fp32: 106 KiB at Dk = Dv = 128, plus two stages of the
// matrix's tile with a matrix (36 KiB fp32, 18 KiB 16-bit); grouped, Members such sets and one stage of the tile.
// Registers: S^T, dP^T (32 fp32 each) and the accumulators (Dk/2 fp32); ptxas 13 (SM90a): 237 at Dk = 128, 160 at
// 64 (4 warps), grouped 251 and 227 (8 warps, at most 256 by the register file), no spills.
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
    retention_parallel_key_backward_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = ParallelBackwardTraits<Element, HeadDim, Members>;
  constexpr int kBlock = Traits::kBlock;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kDkTiles = Traits::kDkTiles;
  constexpr int kTermFloats = Traits::kRowTermFloats;
  const int dv = p.value_columns;
  const int v_pitch = Traits::value_pitch(dv);
  const bool grad_v_role = p.backward_role == kGradVRole;

  // The thread's member (its 4 warps' (batch, value slice)) and its thread within the member (constants with one).
  const int member = Members == 1 ? 0 : static_cast<int>(threadIdx.x) / Traits::kMemberThreads;
  const int member_thread =
      Members == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % Traits::kMemberThreads;
  constexpr int kMemberThreads = Traits::kMemberThreads;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const auto tiles =
      parallel_backward_tiles<Traits, Element>(shared_bytes + member * Traits::member_shared_bytes(dv), v_pitch);
  // One member: two stages of the matrix's tile after its tiles; several: one stage after all the members' tiles.
  unsigned char* decay_tiles = Members == 1 ? tiles.decay : shared_bytes + Traits::shared_bytes(dv);
  Element* k_tile = tiles.fixed_qk;
  Element* q_tiles = tiles.staged_qk;
  Element* v_tile = tiles.fixed_v;
  Element* do_tiles = tiles.staged_v;
  float* row_terms = tiles.row_terms;
  const int do_tile_elements = tiles.v_tile_elements;

  const WarpLane thread = warp_lane(member_thread);
  const int warp = thread.warp, lane = thread.lane, g = thread.g, quad = thread.quad;

  // CTA order: value slice fastest, then key blocks from the first (heaviest with gamma) up, then (batch, head);
  // with a decay matrix the batch right after the slice (the CTAs reading the same matrix columns together), and in
  // the grouped instances (the matrix form only) the (batch, slice) pairs, slice fastest, Members to a CTA: a last,
  // short group leaves its missing members idle (they stage the matrix's tiles and meet the barriers, nothing else).
  const int64_t tokens = p.tokens;
  const bool decay_matrix = Members > 1 || p.decay.data != nullptr;
  const int64_t keys = decay_matrix ? p.tokens_k : tokens;
  const int64_t key_blocks = (keys + kBlock - 1) / kBlock;
  const int64_t query_blocks = (tokens + kBlock - 1) / kBlock;
  const int64_t cta = blockIdx.x;
  int slice = 0;
  int64_t rest = 0;
  int64_t b = 0;
  bool member_active = true;
  if (Members > 1) {
    const int64_t pairs = static_cast<int64_t>(p.batches) * p.dv_slices;
    const int64_t groups = (pairs + Members - 1) / Members;
    const int64_t pair = cta % groups * Members + member;
    member_active = pair < pairs;
    slice = static_cast<int>(pair % p.dv_slices);
    b = member_active ? pair / p.dv_slices : 0;
    rest = cta / groups;
  } else {
    slice = static_cast<int>(cta % p.dv_slices);
    rest = cta / p.dv_slices;
    if (decay_matrix) {
      b = rest % p.batches;
      rest /= p.batches;
    }
  }
  const int64_t key_block = rest % key_blocks;
  rest /= key_blocks;
  const int h = static_cast<int>(rest % p.heads);
  if (!decay_matrix) b = rest / p.heads;
  const int64_t head_index = b * p.heads + h;  // of the row terms [B, H, Tq, 2]

  const auto head = parallel_backward_head<Element>(p, b, h);
  const float log2_gamma = head.log2_gamma;
  const int64_t first_query_block = decay_matrix ? 0 : key_block;
  const bool vector_access = p.vector_access != 0;
  // dK reads all Dv columns of V and dO; dV reads its slice of dO only (64 columns, or Dk when Dv is a multiple
  // of it: as many as the accumulators hold).
  const int value_columns = grad_v_role ? dv / p.dv_slices : dv;
  const int64_t value_offset = grad_v_role ? static_cast<int64_t>(slice) * value_columns : 0;

  const Element* q_base = head.q;
  const Element* k_base = head.k;
  const Element* v_base = head.v;
  const Element* do_base = head.grad_out + value_offset;

  const int64_t k0 = key_block * kBlock;
  if (member_active) {
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(k_tile, k_base, p.k.token, k0, keys, vector_access,
                                                          member_thread);
    if (!grad_v_role) {
      load_rows_of_width<Element, kMemberThreads>(v_tile, v_pitch, v_base, p.v.token, k0, keys, dv, vector_access,
                                                  member_thread);
    }
  }
  // The member's Q, dO and row terms of one query block; the terms with plain stores, visible after the next
  // barrier. With a matrix its tile (query rows q0.., keys k0..) separately, staged by all the CTA's threads.
  auto load_decay_tile = [&](int64_t query_block, int stage) {
    stage_decay_tile_of<Element, true, Traits::kThreads>(decay_tiles, stage, p.decay, h, static_cast<int>(query_block),
                                                         static_cast<int>(key_block), tokens, keys);
  };
  auto load_query_operands = [&](int64_t query_block, int stage) {
    if (!member_active) return;
    const int64_t q0 = query_block * kBlock;
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(q_tiles + stage * Traits::kQkTile, q_base, p.q.token, q0,
                                                          tokens, vector_access, member_thread);
    load_rows_of_width<Element, kMemberThreads>(do_tiles + stage * do_tile_elements, v_pitch, do_base, p.grad_out.token,
                                                q0, tokens, value_columns, vector_access, member_thread);
    const int r = member_thread;
    if (r < kBlock) {
      const int64_t t = q0 + r;
      float* terms = row_terms + (stage * kBlock + r) * kTermFloats;
      float2 norm_terms = make_float2(1.0f, 0.0f);
      if (p.row_terms != nullptr && t < tokens) {
        norm_terms = reinterpret_cast<const float2*>(p.row_terms)[head_index * tokens + t];
      }
      terms[0] = norm_terms.x;
      terms[1] = norm_terms.y;
      terms[2] = t < tokens ? query_row_factor(decay_matrix, p.scale, head.ln_gamma, t) : 0.0f;
    }
  };
  if (first_query_block < query_blocks) {
    load_query_operands(first_query_block, 0);
    if (decay_matrix) load_decay_tile(first_query_block, 0);
  }
  commit_async_copies();

  const int64_t key_lo = k0 + warp * 16 + g;  // the thread's two keys: key_lo and key_lo + 8

  float grad[kDkTiles][4];
  zero_tiles(grad);

  bool operands_fetched = true;  // this block's Q, dO and terms were fetched with its tile (always with gamma)
  for (int64_t query_block = first_query_block; query_block < query_blocks; ++query_block) {
    const int stage = static_cast<int>((query_block - first_query_block) & 1);
    const bool has_next = query_block + 1 < query_blocks;
    // A zero tile adds nothing to the gradients; nor does a warp's all-zero 16 keys of a nonzero tile.
    if constexpr (Members > 1) {
      if (!begin_single_stage_decay_block<Element, true, Traits::kThreads>(
              decay_tiles, p.decay, query_block, stage, has_next, operands_fetched, load_query_operands)) {
        if (has_next) load_decay_tile(query_block + 1, 0);
        commit_async_copies();
        continue;
      }
    } else {
      if (!begin_decay_block<Element, true, Traits::kThreads>(decay_matrix, decay_tiles, p.decay, query_block, stage,
                                                              has_next, operands_fetched, load_query_operands,
                                                              load_decay_tile)) {
        continue;
      }
    }
    const int decay_stage = Members > 1 ? 0 : stage;
    const bool warp_active =
        member_active && (!decay_matrix || decay_strip_nonzero_of<Element, true>(decay_tiles, decay_stage,
                                                                                 p.decay.f32 != 0, warp, lane));
    if (Members == 1 && !warp_active) continue;
    const Element* q_tile = q_tiles + stage * Traits::kQkTile;
    const Element* do_tile = do_tiles + stage * do_tile_elements;
    const float* terms = row_terms + stage * kBlock * kTermFloats;
    const bool diagonal = !decay_matrix && query_block == key_block;
    const int64_t q0 = query_block * kBlock;

    // Query tiles left of the warp's keys on the diagonal block are skipped.
    const auto visit = [&](int np) { return !diagonal || np >= warp; };
    float scores[8][4], score_grads[8][4];
    zero_tiles(scores);
    zero_tiles(score_grads);
    if (warp_active) {
#pragma unroll
      for (int ks = 0; ks < HeadDim / 16; ++ks) {
        mma_rows_k_step<Element>(scores, k_tile, kQkPitch, q_tile, kQkPitch, ks, warp, lane, visit);
      }
      if (!grad_v_role) {
        for (int ks = 0; ks < dv / 16; ++ks) {
          mma_rows_k_step<Element>(score_grads, v_tile, v_pitch, do_tile, v_pitch, ks, warp, lane, visit);
        }
      }
    }
    // Element (nt, e): key key_lo + 8*(e/2), query column nt*8 + 2*quad + e%2 of the block. Queries past the
    // sequence have a zero score factor; keys past it are zero rows of K and V.
    const auto weigh = [&](int nt, int e, float decay) {
      const int column = nt * 8 + 2 * quad + e % 2;
      const float* query_terms = terms + column * kTermFloats;
      const float weight = decay * query_terms[2];
      const float s = weight != 0.0f ? scores[nt][e] * weight : 0.0f;
      if (grad_v_role) {
        scores[nt][e] = s * query_terms[0];
      } else {
        scores[nt][e] = (score_grads[nt][e] * query_terms[0] - sign_of(s) * query_terms[1]) * weight;
      }
    };
    if (warp_active) {
      weigh_key_rows<Element>(p, decay_matrix, decay_tiles, decay_stage, log2_gamma, warp, g, quad, key_lo, q0, weigh);
    }
    if constexpr (Members > 1) {
      // Every warp is done with the tile: the next one goes to its stage while the last MMAs run.
      __syncthreads();
      if (has_next) load_decay_tile(query_block + 1, 0);
      commit_async_copies();
      if (!warp_active) continue;
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (visit(ks)) {
        uint32_t a[4];
        score_a_fragment<Element>(a, scores, ks);
        if (grad_v_role) {
          mma_kn_tile<Element>(grad, a, do_tile, v_pitch, ks * 16, lane, value_columns / 16);
        } else {
          mma_kn_tile<Element>(grad, a, q_tile, kQkPitch, ks * 16, lane);
        }
      }
    }
  }

  if (!member_active) return;
  // dK: Dk columns; dV: the slice's columns.
  Element* out_base = head_output_rows<Element>(p.out, b, h) + value_offset;
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
