// RetNet's normalised parallel retention forward (normalize = true; DESIGN §3) on tensor cores
// (SM80+ mma.sync), one job of retention_params.hpp without states:
//   D_tm = gamma^(t-m) / sqrt(sum_{m'<=t} gamma^(t-m'))   (m <= t, else 0)
//   s_tm = scale * (q_t . k_m) * D_tm,   o_t = sum_m s_tm v_m / max(sum_m |s_tm|, 1).
// The row normaliser is a per-row scalar, so the numerator and the absolute row sum are accumulated
// together over the key blocks and divided once at the end: no rescaling pass, and every score is
// used once. The decay row sum has the closed form expm1((t+1) ln gamma) / expm1(ln gamma).
//
// Tiling: one CTA of 4 warps owns one (batch, head, 64 query rows, 64 value columns); warp w holds
// query rows 16w..16w+15. It walks the key blocks 0..(its query block) in order with K and V double
// buffered (cp.async); the diagonal block is masked and the warps skip its key blocks above their
// rows. Within a head, heavy query blocks (late ones, with the most key blocks) are launched first.
//
// Explicit decay matrix (p.decay.data set; the parallel form of RetentionForward::decay): D_tm is read from
// the matrix [H|1, Tq, Tk] instead, the rows are not rescaled, and the final division by max(sum |s|, 1)
// happens only with p.decay.normalize. Every key block 0..ceil(Tk/64)-1 is visited: its 64x64 tile of the
// matrix is staged in shared memory in the same cp.async group as its K and V (retention_decay_tile.cuh), and a
// warp whose 16 rows of the tile are all zero skips the block pair's MMAs (for a causal matrix: every tile above
// the diagonal, for all four warps of every member). The grouped instances also learn at the block's barrier whether
// the whole tile is zero (begin_decay_block, retention_decay_tile.cuh) and then fetch the next block's K and V only
// once a nonzero tile shows up: a run of zero tiles (a causal matrix's upper triangle) costs only the matrix's read.
//
// Batch grouping (the matrix form, Members = kDecayMatrixMembers): the matrix does not depend on the batch, so one
// CTA computes Members of the B * Dv/64 (batch, value slice) pairs of a (head, query block), each member being the
// 4 warps above with its own Q, K and V tiles; all the CTA's threads stage each matrix tile once for all members,
// and the members walk the key blocks in lockstep (one barrier per block). Pairs are taken slice fastest, then
// batch; a last, short group leaves its missing members idle (they stage and wait, nothing else). CTA order: the
// groups of a (head, query block), then the query blocks (heavy first), then the head, so the groups reading the
// same rows of a head's matrix run together and all but the first read them from L2.
//
// Work: per (query block, key block) pair 2*64*64*Dk (Q K^T) + 2*64*64*64 per value block (P V), so
// about T^2/2 * (2*Dk + 2*Dv) FLOPs per head when Dv = 64, plus Q K^T again per extra value block. With a
// matrix, the pairs of the (warp strip, key block)s with a nonzero entry: Tq*Tk for a dense matrix, about T^2/2
// for a causal one (the diagonal tiles are computed whole). Bytes with a matrix, B8 T4096 H16 Dk = Dv = 128, a
// causal fp32 matrix [16, 4096, 4096] (1 GiB): DRAM sees each head's matrix about once (0.2 ms at 4.8 TB/s); into
// the SMs every (CTA, key block) brings one matrix tile (16 KiB) and every (member, fetched key block) K (16 KiB)
// and a V slice (8 KiB). One member per CTA, every block fetched: 16384 CTAs x 64 blocks x 40 KiB = 40 GiB. Two
// members, K and V of the nonzero tiles only (query block qb: blocks 0..qb, and qb + 1 fetched before its tile is
// known zero; 33.5 of 64 on average): 8192 CTAs x (64 x 16 + 33.5 x 2 x 24) KiB = 21 GiB, of which the matrix 8.
// Executed FLOPs 0.82 T (0.55 useful: Q K^T once
// per value slice). Shared memory: per member (3 * 64 * (Dk+8) + 2 * 64 * 72) 16-bit entries, 69 KiB at Dk = 128
// and 45 KiB at 64, plus two stages of the tile, 64 x 72 entries, 36 KiB (fp32) or 18 KiB (16-bit): two members
// take 174 / 126 KiB, one CTA of 8 warps per multiprocessor, as many warps as two one-member CTAs (SM80's 163 KiB
// does not fit Dk = 128 with fp32 entries there: the plan runs one member per CTA on such a device).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_chunk_kernel.cuh"
#include "cuda/retention/retention_decay.cuh"
#include "cuda/retention/retention_decay_tile.cuh"
#include "cuda/retention/retention_fragments.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int Members = 1>
struct NormalizedTraits {
  static constexpr int kBlock = 64;  // query rows and keys per block
  static constexpr int kValueBlock = 64;
  static constexpr int kMembers = Members;  // (batch, value slice) pairs per CTA, 4 warps each
  static constexpr int kMemberThreads = 128;
  static constexpr int kThreads = kMemberThreads * Members;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kVPitch = kValueBlock + 8;
  static constexpr int kQkTile = kBlock * kQkPitch;
  static constexpr int kVTile = kBlock * kVPitch;
  // Per member: Q, K [2 stages], V [2 stages]; the members' tiles one after another, and with a decay matrix two
  // stages of its tile after them (decay_tiles_shared_bytes), shared by the members.
  static constexpr int kMemberSharedBytes = (3 * kQkTile + 2 * kVTile) * static_cast<int>(sizeof(Element));
  static constexpr int kSharedBytes = Members * kMemberSharedBytes;
  static_assert(kSharedBytes + kDecayTilesMaxSharedBytes <= kMaxSharedBytesPerBlock, "a launch fits shared memory");
  // Registers per thread, held to what the gamma form alone needs, so that the matrix path (a uniform branch of
  // the same kernel) neither lowers the gamma form's occupancy nor adds spills. SM90 (ptxas 13: 126 and 135
  // before the matrix path existed): 4 CTAs per multiprocessor at Dk = 64, 3 at 128, as its shared memory
  // allows. SM80 (160 and 168 before): 3 CTAs at Dk = 64 and 2 at 128 (shared memory) allow 168. The grouped
  // instances (Members = 2, the matrix form only) run one CTA of 8 warps per multiprocessor (their shared memory,
  // 126 KiB or more, allows no second), as many warps as two one-member CTAs; they may take 200 registers (51 K of
  // the 64 K; ptxas 13: 190 at Dk = 128 and 186 at 64, no spills; 48 bytes of spills at 168).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kMaxRegisters = 168;
#else
  static constexpr int kMaxRegisters = Members > 1 ? 200 : HeadDim == 64 ? 128 : 136;
#endif
};

// D_tm before the query row's factor with gamma, for query t and key m: gamma^(t-m) for m <= t, 0 above the
// diagonal. (A decay matrix's entries come from its staged tiles: retention_decay_tile.cuh.)
__device__ __forceinline__ float gamma_decay_weight(float log2_gamma, int64_t t, int64_t m) {
  return m <= t ? decay_power(log2_gamma, static_cast<float>(t - m)) : 0.0f;
}

// Calls weigh(nt, e, D_tm) for every entry (nt, e) of a thread's score fragments of a warp's 16 query rows
// (row_lo = its first row of g, + 8) by 64 keys from k0: D_tm from the stage's staged tile of a decay matrix
// (the forward and dQ read it by rows), or the gamma power.
template <class Element, class Weigh>
__device__ __forceinline__ void weigh_query_rows(const ChunkParams& p, bool decay_matrix,
                                                 const unsigned char* decay_tiles, int stage, float log2_gamma,
                                                 int warp, int g, int quad, int64_t row_lo, int64_t k0, Weigh&& weigh) {
  if (decay_matrix) {
    const auto weigh_from_tile = [&](auto entry) {
      using Entry = typename decltype(entry)::type;
      const Entry* tile = decay_tile_stage<Entry>(decay_tiles, stage);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float2 weight = decay_tile_pair<Element, Entry, decay_tile_pitch<Entry, false>()>(
              tile, warp * 16 + g + 8 * half, nt * 8 + 2 * quad);
          weigh(nt, 2 * half, weight.x);
          weigh(nt, 2 * half + 1, weight.y);
        }
    };
    with_decay_entry_type<Element>(p.decay.f32 != 0, weigh_from_tile);
    return;
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      weigh(nt, e, gamma_decay_weight(log2_gamma, row_lo + 8 * (e / 2), k0 + nt * 8 + 2 * quad + e % 2));
    }
}

// The same for dK and dV, whose score fragments are a warp's 16 keys (key_lo, + 8) by 64 query columns from q0:
// the staged tile read down its columns.
template <class Element, class Weigh>
__device__ __forceinline__ void weigh_key_rows(const ChunkParams& p, bool decay_matrix,
                                               const unsigned char* decay_tiles, int stage, float log2_gamma, int warp,
                                               int g, int quad, int64_t key_lo, int64_t q0, Weigh&& weigh) {
  if (decay_matrix) {
    const auto weigh_from_tile = [&](auto entry) {
      using Entry = typename decltype(entry)::type;
      const Entry* tile = decay_tile_stage<Entry>(decay_tiles, stage);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          weigh(nt, e,
                decay_tile_entry<Entry, decay_tile_pitch<Entry, true>()>(tile, nt * 8 + 2 * quad + e % 2,
                                                                         warp * 16 + g + 8 * (e / 2)));
        }
    };
    with_decay_entry_type<Element>(p.decay.f32 != 0, weigh_from_tile);
    return;
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      weigh(nt, e, gamma_decay_weight(log2_gamma, q0 + nt * 8 + 2 * quad + e % 2, key_lo + 8 * (e / 2)));
    }
}

// The factor every score of query row t is multiplied by besides the decay power: scale / sqrt(sum_{j<=t}
// gamma^j) with gamma (the closed form of the normalised form), scale with a decay matrix (used as given).
__device__ __forceinline__ float query_row_factor(bool decay_matrix, float scale, float ln_gamma, int64_t t) {
  if (decay_matrix) return scale;
  const float rows = static_cast<float>(t + 1);
  const float decay_sum = ln_gamma == 0.0f ? rows : expm1f(rows * ln_gamma) / expm1f(ln_gamma);
  return scale * rsqrtf(decay_sum);
}

// The (batch b, head h) sequence of an operand.
template <class Element>
__device__ __forceinline__ const Element* head_rows(const SequenceOperand& operand, int64_t b, int h) {
  return static_cast<const Element*>(operand.data) + b * operand.batch + h * operand.head;
}
// The same for the written output.
template <class Element>
__device__ __forceinline__ Element* head_output_rows(const SequenceOperand& operand, int64_t b, int h) {
  return static_cast<Element*>(const_cast<void*>(operand.data)) + b * operand.batch + h * operand.head;
}

// One row pair's stored 16-bit values at columns (col, col + 1) of `row`, paired or element-wise.
template <class Element>
__device__ __forceinline__ void store_pair(Element* row, int col, uint32_t pair, bool vector_access) {
  if (vector_access) {
    *reinterpret_cast<uint32_t*>(row + col) = pair;
  } else {
    const Element* elements = reinterpret_cast<const Element*>(&pair);
    row[col] = elements[0];
    row[col + 1] = elements[1];
  }
}

template <class Element, int HeadDim, int Members>
__global__ void __launch_bounds__(NormalizedTraits<Element, HeadDim, Members>::kThreads)
    __maxnreg__((NormalizedTraits<Element, HeadDim, Members>::kMaxRegisters))
        retention_normalized_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = NormalizedTraits<Element, HeadDim, Members>;
  constexpr int kBlock = Traits::kBlock;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kVPitch = Traits::kVPitch;
  constexpr int kNT = Traits::kValueBlock / 8;

  // The thread's member (its 4 warps' (batch, value slice)), its thread and warp within the member.
  // (Constants with one member, so that the one-member instances hold no more registers than before grouping.)
  const int member = Members == 1 ? 0 : static_cast<int>(threadIdx.x) / Traits::kMemberThreads;
  const int member_thread =
      Members == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % Traits::kMemberThreads;
  const int warp = member_thread / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* q_tile = reinterpret_cast<Element*>(shared_bytes + member * Traits::kMemberSharedBytes);
  Element* k_tiles = q_tile + Traits::kQkTile;
  Element* v_tiles = k_tiles + 2 * Traits::kQkTile;
  const int g = lane / 4;
  const int quad = lane % 4;

  // CTA order: value slice fastest, then query blocks from the last (heaviest) one down, then (batch, head).
  // With a decay matrix the (batch, slice) pairs of one (head, query block), slice fastest, are grouped Members to a
  // CTA (the last group may be short: its missing members idle), then come the query blocks, then the head: the
  // CTA stages each tile of the matrix once for its members, and the groups reading the same rows run together.
  // (The grouped instances run the matrix form only: the gamma form's code is compiled out of them.)
  const bool decay_matrix = Members > 1 || p.decay.data != nullptr;
  const int64_t query_blocks = (p.tokens + kBlock - 1) / kBlock;
  const int64_t cta = blockIdx.x;
  int slice = 0;
  int64_t b = 0;
  int64_t query_block = 0;
  int h = 0;
  bool member_active = true;
  if (decay_matrix) {
    const int64_t pairs = static_cast<int64_t>(p.batches) * p.dv_slices;
    const int64_t groups = (pairs + Members - 1) / Members;
    const int64_t pair = cta % groups * Members + member;
    member_active = Members == 1 || pair < pairs;
    slice = static_cast<int>(pair % p.dv_slices);
    b = member_active ? pair / p.dv_slices : 0;
    const int64_t rest = cta / groups;
    query_block = query_blocks - 1 - rest % query_blocks;
    h = static_cast<int>(rest / query_blocks);
  } else {
    slice = static_cast<int>(cta % p.dv_slices);
    const int64_t rest = cta / p.dv_slices;
    query_block = query_blocks - 1 - rest % query_blocks;
    const int64_t head_index = rest / query_blocks;
    h = static_cast<int>(head_index % p.heads);
    b = head_index / p.heads;
  }

  const float log2_gamma = head_log2_gamma(p, h);
  const float ln_gamma = log2_gamma * 0.69314718055994530942f;
  const float scale = p.scale;
  const int64_t tokens = p.tokens;
  const int64_t keys = decay_matrix ? p.tokens_k : tokens;
  const int64_t last_key_block = decay_matrix ? (keys + kBlock - 1) / kBlock - 1 : query_block;
  const bool vector_access = p.vector_access != 0;

  const Element* q_base = head_rows<Element>(p.q, b, h);
  const Element* k_base = head_rows<Element>(p.k, b, h);
  const Element* v_base = head_rows<Element>(p.v, b, h) + static_cast<int64_t>(slice) * Traits::kValueBlock;
  Element* out_base = head_output_rows<Element>(p.out, b, h) + static_cast<int64_t>(slice) * Traits::kValueBlock;

  // The matrix's tiles (two stages) after V.
  unsigned char* decay_tiles = shared_bytes + Traits::kSharedBytes;  // after every member's tiles

  const int64_t q0 = query_block * kBlock;
  constexpr int kMemberThreads = Traits::kMemberThreads;
  if (member_active) {
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(q_tile, q_base, p.q.token, q0, tokens, vector_access,
                                                          member_thread);
  }
  // The member's K and V of a key block; with a matrix the block's tile (query rows q0.., keys k0..), staged by all
  // the CTA's threads.
  auto load_key_operands = [&](int64_t key_block, int stage) {
    if (!member_active) return;
    const int64_t k0 = key_block * kBlock;
    load_rows<Element, HeadDim, kQkPitch, kMemberThreads>(k_tiles + stage * Traits::kQkTile, k_base, p.k.token, k0,
                                                          keys, vector_access, member_thread);
    load_rows<Element, Traits::kValueBlock, kVPitch, kMemberThreads>(v_tiles + stage * Traits::kVTile, v_base,
                                                                     p.v.token, k0, keys, vector_access, member_thread);
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

  // The thread's two query rows (global token indices) and their decay normalisers 1/sqrt(row sum).
  const int64_t row_lo = q0 + warp * 16 + g;
  float row_factor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half)
    row_factor[half] = query_row_factor(decay_matrix, scale, ln_gamma, row_lo + 8 * half);

  float out[kNT][4];
  zero_tiles(out);
  float abs_sum[2] = {0.0f, 0.0f};

  bool operands_fetched = true;  // this block's K and V were fetched with its tile
  for (int64_t key_block = 0; key_block <= last_key_block; ++key_block) {
    const int stage = static_cast<int>(key_block & 1);
    const bool has_next = key_block + 1 <= last_key_block;
    if constexpr (Members > 1) {
      // This block's tile, K and V visible (K and V fetched late after a zero tile); the next block's K and V only
      // after a nonzero tile. A zero tile adds nothing to any sum.
      if (!begin_decay_block<Element, false, Traits::kThreads>(true, decay_tiles, p.decay, key_block, stage, has_next,
                                                               operands_fetched, load_key_operands, load_decay_tile)) {
        continue;
      }
    } else {
      wait_async_copies<0>();
      __syncthreads();  // this block's K, V (and Q, and the matrix's tile) visible; the other stage is free
      if (has_next) {
        load_key_operands(key_block + 1, stage ^ 1);
        if (decay_matrix) load_decay_tile(key_block + 1, stage ^ 1);
      }
      commit_async_copies();
    }
    if (!member_active) continue;  // an idle member's warps take part in the barriers and the matrix's staging only
    // A warp whose 16 rows of the matrix tile are all zero skips the block pair: its scores would all be 0 and add
    // 0 to every sum.
    if (decay_matrix && !decay_strip_nonzero_of<Element, false>(decay_tiles, stage, p.decay.f32 != 0, warp, lane)) {
      continue;
    }
    const Element* k_tile = k_tiles + stage * Traits::kQkTile;
    const Element* v_tile = v_tiles + stage * Traits::kVTile;
    const bool diagonal = !decay_matrix && key_block == query_block;
    const int64_t k0 = key_block * kBlock;

    // Key tiles above the warp's rows on the diagonal block are skipped.
    const auto visit = [&](int np) { return !diagonal || np <= warp; };
    float scores[8][4];
    zero_tiles(scores);
#pragma unroll
    for (int ks = 0; ks < HeadDim / 16; ++ks) {
      mma_rows_k_step<Element>(scores, q_tile, kQkPitch, k_tile, kQkPitch, ks, warp, lane, visit);
    }
    // Decay, normaliser and causal mask; keys past the sequence are zero rows of K, so their scores are 0.
    const auto weigh = [&](int nt, int e, float weight) {
      const float s = weight != 0.0f ? scores[nt][e] * row_factor[e / 2] * weight : 0.0f;
      scores[nt][e] = s;
      abs_sum[e / 2] += fabsf(s);
    };
    weigh_query_rows<Element>(p, decay_matrix, decay_tiles, stage, log2_gamma, warp, g, quad, row_lo, k0, weigh);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if (visit(ks)) {
        uint32_t a[4];
        score_a_fragment<Element>(a, scores, ks);
        mma_kn_tile<Element>(out, a, v_tile, kVPitch, ks * 16, lane);
      }
    }
  }

  if (!member_active) return;
    // The four lanes of a quad share their rows: their partial absolute sums make the row's.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 1);
    abs_sum[half] += __shfl_xor_sync(0xffffffffu, abs_sum[half], 2);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = row_lo + 8 * half;
    if (i >= tokens) continue;
    const bool normalize = !decay_matrix || p.decay.normalize != 0;
    const float inverse = normalize ? 1.0f / fmaxf(abs_sum[half], 1.0f) : 1.0f;
    Element* row = out_base + i * p.out.token;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      store_pair(row, nt * 8 + 2 * quad,
                 pack_pair<Element>(out[nt][2 * half] * inverse, out[nt][2 * half + 1] * inverse), vector_access);
    }
  }
}

}  // namespace attnkit::cuda::retention
