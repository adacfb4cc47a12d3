// Chunkwise retention on tensor cores (SM80+ mma.sync; runs on Hopper as well), one job of
// retention_params.hpp.
//
// Algorithm. One CTA of 4 warps owns one (batch, head, slice of Dv_block value columns) and walks the
// sequence in chunks of C = 64 tokens, keeping the fp32 state slice S [Dk, Dv_block] in registers (each
// warp holds Dk/4 rows) and a 16-bit copy of it in shared memory as the right operand of Q S. Per chunk
// starting at t0 with L = min(C, T - t0) real tokens (rows past L are zero-filled):
//   scores   A = Q K^T                                (warp w: rows 16w..16w+15, keys <= its last row)
//   masked   P_ij = scale * gamma^(i-j) * A_ij, i >= j, else 0 (on the accumulators, then packed to 16 bits)
//   output   O = diag(scale * gamma^(i+1)) Q S + P V  (the rows of S are the chunk's incoming state)
//   state    S <- gamma^L S + (diag(gamma^(L-1-j)) K)^T V  (K's rows are rescaled in shared memory)
// Loads of chunk c+1 (cp.async, double buffered) overlap the math of chunk c. The state never leaves
// the chip between chunks: it is read once (initial state) and written once (final state).
//
// Segments (retention_params.hpp): when B * H * slices CTAs are too few for the GPU, the sequence is
// cut into segments; a first launch (state_only) computes each segment's own state with the state
// update alone, and the second starts segment s from S0 and the states of segments < s.
//
// Work per chunk and CTA, D = Dk, E = Dv_block: Q K^T 2*C*C*D (the warps skip key blocks above their
// rows: 5/8 of it is issued), Q S 2*C*D*E, P V 2*C*C*E (5/8 issued), state 2*C*D*E. Per token and
// head at D = Dv = 128, E = 64 (two slices): 96 kFLOP executed against the issue's nominal count of
// 2*64*2*D + 4*D^2 = 98 kFLOP; segments add the state-only pass, 2*D*Dv per token of all segments but
// the last. Bytes: DRAM reads q, k, v and writes out once (4*D*2 bytes per token and head at D = Dv,
// states once per (batch, head)); Q and K are re-read by each of the Dv/E slices, from L2 when the
// slices of a head run together, which the CTA order arranges. At B8 T4096 H16 D128 that is 537 MB
// against 51.5 GFLOP: memory-bound on an H100 (0.16 ms at 3.35 TB/s, against 0.05 ms of dense bf16
// tensor-core time), so the floor is the copy time of q, k, v and out.
//
// Tiling and shared memory (16-bit elements, rows padded by 8 so ldmatrix rows fall in distinct banks):
// Q, K [2 stages][C][D+8], V [2][C][E+8], S [D][E+8]: 104 KiB at D = 128, E = 64.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/retention/retention_fragments.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int ValueBlock>
struct ChunkTraits {
  static constexpr int kChunk = 64;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kVPitch = ValueBlock + 8;
  static constexpr int kStateRowsPerWarp = HeadDim / kWarps;
  static constexpr int kStateMTiles = kStateRowsPerWarp / 16;
  static constexpr int kValueNTiles = ValueBlock / 8;
  static constexpr int kQkStage = kChunk * kQkPitch;
  static constexpr int kVStage = kChunk * kVPitch;
  static constexpr int kSharedElements = 4 * kQkStage + 2 * kVStage + HeadDim * kVPitch;
  static constexpr int kSharedBytes = kSharedElements * static_cast<int>(sizeof(Element));
  static_assert(HeadDim % 64 == 0, "each warp's state rows are whole 16-row MMA tiles");
  static_assert(ValueBlock % 16 == 0, "value columns come in pairs of 8-wide MMA tiles");
};

// gamma^n for a real exponent n.
__device__ __forceinline__ float decay_power(float log2_gamma, float n) { return exp2f(n * log2_gamma); }

// Rows [t0, t0 + kChunk) x `Cols` columns starting at `col0` of one (batch, head) sequence operand into
// a shared tile; rows at or past `tokens` become zeros.
template <class Element, int Cols, int Pitch, int Threads>
__device__ __forceinline__ void load_rows(Element* tile, const Element* head_base, int64_t token_stride, int64_t t0,
                                          int64_t tokens, bool vector_access) {
  constexpr int kRows = 64;
  if (vector_access) {
    constexpr int kVectorsPerRow = Cols / 8;
    for (int i = static_cast<int>(threadIdx.x); i < kRows * kVectorsPerRow; i += Threads) {
      const int r = i / kVectorsPerRow;
      const int c = (i % kVectorsPerRow) * 8;
      const bool valid = t0 + r < tokens;
      const Element* source = valid ? head_base + (t0 + r) * token_stride + c : head_base;
      copy_16_bytes_async(shared_address(tile + r * Pitch + c), source, valid);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < kRows * Cols; i += Threads) {
      const int r = i / Cols;
      const int c = i % Cols;
      tile[r * Pitch + c] = t0 + r < tokens ? head_base[(t0 + r) * token_stride + c] : Element(0.0f);
    }
  }
}

template <class Element, int HeadDim, int ValueBlock>
__global__ void __launch_bounds__(ChunkTraits<Element, HeadDim, ValueBlock>::kThreads)
    retention_chunk_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = ChunkTraits<Element, HeadDim, ValueBlock>;
  constexpr int C = Traits::kChunk;
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kVPitch = Traits::kVPitch;
  constexpr int kMT = Traits::kStateMTiles;
  constexpr int kNT = Traits::kValueNTiles;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Element* q_tiles = reinterpret_cast<Element*>(shared_bytes);
  Element* k_tiles = q_tiles + 2 * Traits::kQkStage;
  Element* v_tiles = k_tiles + 2 * Traits::kQkStage;
  Element* state_tile = v_tiles + 2 * Traits::kVStage;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int quad = lane % 4;

  // Slices of one head and segment are neighbours in the launch order, so they share Q and K through L2.
  const int64_t cta = blockIdx.x;
  const int slice = static_cast<int>(cta % p.dv_slices);
  const int64_t segment_index = cta / p.dv_slices;
  const int segment = static_cast<int>(segment_index % p.segments);
  const int64_t head_index = segment_index / p.segments;
  const int h = static_cast<int>(head_index % p.heads);
  const int64_t b = head_index / p.heads;
  const bool state_only = p.state_only != 0;
  if (state_only && segment == p.segments - 1) return;  // the last segment's own state is never needed

  float log2_gamma;
  if (p.default_gamma) {
    log2_gamma = static_cast<float>(log1p(-exp2(-5.0 - h)) / 0.69314718055994530942);
  } else {
    log2_gamma = p.log2_gamma[h];
  }
  const float gamma = exp2f(log2_gamma);
  const float scale = p.scale;

  const int64_t segment_begin = segment * p.segment_tokens;
  const int64_t tokens = p.tokens < segment_begin + p.segment_tokens ? p.tokens : segment_begin + p.segment_tokens;
  const bool vector_access = p.vector_access != 0;
  const auto* q_base = static_cast<const Element*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + b * p.k.batch + h * p.k.head;
  const auto* v_base =
      static_cast<const Element*>(p.v.data) + b * p.v.batch + h * p.v.head + static_cast<int64_t>(slice) * ValueBlock;
  auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + b * p.out.batch + h * p.out.head +
                   static_cast<int64_t>(slice) * ValueBlock;

  // The warp's state rows: element (mt, nt, e) is row state_row0 + mt*16 + g + 8*(e/2),
  // column nt*8 + 2*quad + e%2 of the slice.
  const int state_row0 = warp * Traits::kStateRowsPerWarp;
  // This CTA's block of segment s's state in segment_states.
  auto segment_state = [&](int s) {
    return p.segment_states + (((b * p.heads + h) * (p.segments - 1) + s) * HeadDim) * p.value_columns +
           static_cast<int64_t>(slice) * ValueBlock;
  };
  float state[kMT][kNT][4];
  if (state_only) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) state[mt][nt][e] = 0.0f;
  } else {
    const float factor = p.gradient_state_factors ? 1.0f / (scale * gamma) : 1.0f;
    const StateOperand& s0 = p.initial_state;
    const float* s0_base =
        s0.data == nullptr ? nullptr
                           : s0.data + b * s0.batch + h * s0.head + static_cast<int64_t>(slice) * ValueBlock * s0.col;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = state_row0 + mt * 16 + g + 8 * half;
          const int col = nt * 8 + 2 * quad;
          float2 pair = make_float2(0.0f, 0.0f);
          if (s0_base != nullptr && s0.pairs) {
            pair = *reinterpret_cast<const float2*>(s0_base + row * s0.row + col);
          } else if (s0_base != nullptr) {
            pair = make_float2(s0_base[row * s0.row + col * s0.col], s0_base[row * s0.row + (col + 1) * s0.col]);
          }
          state[mt][nt][2 * half] = factor * pair.x;
          state[mt][nt][2 * half + 1] = factor * pair.y;
        }
    // The earlier segments' own states, oldest first: S <- gamma^segment_tokens S + S_j.
    const float segment_decay = decay_power(log2_gamma, static_cast<float>(p.segment_tokens));
    for (int j = 0; j < segment; ++j) {
      const float* own = segment_state(j);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = state_row0 + mt * 16 + g + 8 * half;
            const float2 pair =
                *reinterpret_cast<const float2*>(own + static_cast<int64_t>(row) * p.value_columns + nt * 8 + 2 * quad);
            state[mt][nt][2 * half] = segment_decay * state[mt][nt][2 * half] + pair.x;
            state[mt][nt][2 * half + 1] = segment_decay * state[mt][nt][2 * half + 1] + pair.y;
          }
    }
  }
  auto store_state_tile = [&] {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = state_row0 + mt * 16 + g + 8 * half;
          const int col = nt * 8 + 2 * quad;
          *reinterpret_cast<uint32_t*>(state_tile + row * kVPitch + col) =
              pack_pair<Element>(state[mt][nt][2 * half], state[mt][nt][2 * half + 1]);
        }
  };
  if (!state_only) store_state_tile();

  auto load_chunk = [&](int64_t chunk, int stage) {
    const int64_t t0 = segment_begin + chunk * C;
    if (!state_only) {
      load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(q_tiles + stage * Traits::kQkStage, q_base, p.q.token, t0,
                                                              tokens, vector_access);
    }
    load_rows<Element, HeadDim, kQkPitch, Traits::kThreads>(k_tiles + stage * Traits::kQkStage, k_base, p.k.token, t0,
                                                            tokens, vector_access);
    load_rows<Element, ValueBlock, kVPitch, Traits::kThreads>(v_tiles + stage * Traits::kVStage, v_base, p.v.token, t0,
                                                              tokens, vector_access);
  };

  const int64_t chunks = tokens > segment_begin ? (tokens - segment_begin + C - 1) / C : 0;
  if (chunks > 0) load_chunk(0, 0);
  commit_async_copies();

  const int row_lo = warp * 16 + g;  // the thread's two chunk rows: row_lo and row_lo + 8
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int stage = static_cast<int>(chunk & 1);
    wait_async_copies<0>();
    __syncthreads();  // chunk's tiles and the state tile visible; the other stage is free
    if (chunk + 1 < chunks) load_chunk(chunk + 1, stage ^ 1);
    commit_async_copies();

    const Element* q_tile = q_tiles + stage * Traits::kQkStage;
    Element* k_tile = k_tiles + stage * Traits::kQkStage;
    const Element* v_tile = v_tiles + stage * Traits::kVStage;
    const int64_t t0 = segment_begin + chunk * C;
    const int length = static_cast<int>(tokens - t0 < C ? tokens - t0 : C);

    if (!state_only) {
      // Scores of the warp's 16 rows against the chunk's keys, and Q S for its output rows.
      float scores[8][4];
      float out[kNT][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) scores[nt][e] = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[nt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < HeadDim / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4(a, a_rows(q_tile, kQkPitch, warp * 16, ks * 16, lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          if (np <= warp) {  // key block np holds keys <= the warp's last row only when np <= warp
            uint32_t bk[4];
            ldmatrix_x4(bk, b_rows_nk(k_tile, kQkPitch, np * 16, ks * 16, lane));
            mma_16816<Element>(scores[2 * np], a, bk[0], bk[1]);
            mma_16816<Element>(scores[2 * np + 1], a, bk[2], bk[3]);
          }
        }
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          uint32_t bs[4];
          ldmatrix_x4_trans(bs, b_rows_kn(state_tile, kVPitch, ks * 16, np * 16, lane));
          mma_16816<Element>(out[2 * np], a, bs[0], bs[1]);
          mma_16816<Element>(out[2 * np + 1], a, bs[2], bs[3]);
        }
      }
      {
        const float factor_lo = scale * decay_power(log2_gamma, static_cast<float>(row_lo + 1));
        const float factor_hi = scale * decay_power(log2_gamma, static_cast<float>(row_lo + 9));
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          out[nt][0] *= factor_lo;
          out[nt][1] *= factor_lo;
          out[nt][2] *= factor_hi;
          out[nt][3] *= factor_hi;
        }
      }
      // Decay mask on the scores, then P V.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = row_lo + 8 * (e / 2);
          const int j = nt * 8 + 2 * quad + e % 2;
          scores[nt][e] = j <= i ? scores[nt][e] * scale * decay_power(log2_gamma, static_cast<float>(i - j)) : 0.0f;
        }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        if (ks <= warp) {
          uint32_t a[4];
          score_a_fragment<Element>(a, scores, ks);
          mma_kn_tile<Element>(out, a, v_tile, kVPitch, ks * 16, lane);
        }
      }
      // Output rows past the sequence's end are not written.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = row_lo + 8 * half;
        if (i < length) {
          Element* row = out_base + (t0 + i) * p.out.token;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const int col = nt * 8 + 2 * quad;
            const uint32_t pair = pack_pair<Element>(out[nt][2 * half], out[nt][2 * half + 1]);
            if (vector_access) {
              *reinterpret_cast<uint32_t*>(row + col) = pair;
            } else {
              const Element* elements = reinterpret_cast<const Element*>(&pair);
              row[col] = elements[0];
              row[col + 1] = elements[1];
            }
          }
        }
      }
    }  // !state_only

    __syncthreads();  // every warp is done with K (scores) and the state tile (Q S)

    // K rows j < L scaled by gamma^(L-1-j); each warp scales the key columns that are its own state rows,
    // the only part of K it reads below. Rows past L are zeros already.
    {
      constexpr int kVectorsPerRow = Traits::kStateRowsPerWarp / 8;
      for (int i = lane; i < C * kVectorsPerRow; i += 32) {
        const int j = i / kVectorsPerRow;
        if (j >= length) continue;
        const float factor = decay_power(log2_gamma, static_cast<float>(length - 1 - j));
        uint4* vector = reinterpret_cast<uint4*>(k_tile + j * kQkPitch + state_row0 + (i % kVectorsPerRow) * 8);
        uint4 bits = *vector;
        uint32_t* words = reinterpret_cast<uint32_t*>(&bits);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const float2 pair = unpack_pair<Element>(words[w]);
          words[w] = pack_pair<Element>(pair.x * factor, pair.y * factor);
        }
        *vector = bits;
      }
      __syncwarp();
    }

    // S <- gamma^L S + K~^T V.
    {
      const float chunk_decay = decay_power(log2_gamma, static_cast<float>(length));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) state[mt][nt][e] *= chunk_decay;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ldmatrix_x4_trans(a[mt], a_rows_km(k_tile, kQkPitch, ks * 16, state_row0 + mt * 16, lane));
        }
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, b_rows_kn(v_tile, kVPitch, ks * 16, np * 16, lane));
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma_16816<Element>(state[mt][2 * np], a[mt], bv[0], bv[1]);
            mma_16816<Element>(state[mt][2 * np + 1], a[mt], bv[2], bv[3]);
          }
        }
      }
    }
    if (!state_only) store_state_tile();  // read by the next chunk after its first barrier
  }

  if (state_only) {
    float* own = segment_state(segment);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = state_row0 + mt * 16 + g + 8 * half;
          *reinterpret_cast<float2*>(own + static_cast<int64_t>(row) * p.value_columns + nt * 8 + 2 * quad) =
              make_float2(state[mt][nt][2 * half], state[mt][nt][2 * half + 1]);
        }
  } else if (p.final_state.data != nullptr && segment == p.segments - 1) {
    const float factor = p.gradient_state_factors ? scale * gamma : 1.0f;
    const StateOperand& s1 = p.final_state;
    float* s1_base = s1.data + b * s1.batch + h * s1.head + static_cast<int64_t>(slice) * ValueBlock * s1.col;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = state_row0 + mt * 16 + g + 8 * half;
          const int col = nt * 8 + 2 * quad;
          const float2 pair = make_float2(factor * state[mt][nt][2 * half], factor * state[mt][nt][2 * half + 1]);
          if (s1.pairs) {
            *reinterpret_cast<float2*>(s1_base + row * s1.row + col) = pair;
          } else {
            s1_base[row * s1.row + col * s1.col] = pair.x;
            s1_base[row * s1.row + (col + 1) * s1.col] = pair.y;
          }
        }
  }
}

}  // namespace attnkit::cuda::retention
