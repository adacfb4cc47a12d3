// Chunkwise retention on tensor cores (SM80+ mma.sync; runs on Hopper as well), one job of
// retention_params.hpp.
//
// Algorithm. One CTA owns one (batch, head, slice of Dv_block value columns) and walks the sequence in
// chunks of C = 64 tokens. Per chunk starting at t0 with L = min(C, T - t0) real tokens (rows past L are
// zero-filled), S the state before the chunk:
//   scores   A = Q K^T                                (output warp w: rows 16w..16w+15, keys <= its last row)
//   masked   P_ij = scale * gamma^(i-j) * A_ij, i >= j, else 0 (on the accumulators, then packed to 16 bits)
//   output   O = diag(scale * gamma^(i+1)) Q S + P V
//   state    S <- gamma^L S + (diag(gamma^(L-1-j)) K)^T V
// The CTA's 8 warps take two roles. Four output warps compute the first three lines from a 16-bit copy of S
// in shared memory; four state warps keep the fp32 state slice S [Dk, Dv_block] in registers (each holds
// Dk/4 rows) and compute the last line from the same K and V tiles, scaling K's fragments by gamma^(L-1-j)
// in registers. The only dependency between the roles within a chunk is the 16-bit state tile: the state
// warps overwrite it with the new state once the output warps have read it (a named barrier the output
// warps arrive at after Q S), so a chunk's output products and its state update run at the same time.
// Loads of chunk c+1 (cp.async by the state warps, double buffered) overlap the math of chunk c. The state never
// leaves the chip between chunks: it is read once (initial state) and written once (final state).
//
// Why two roles: with one role (4 warps doing every phase in turn) a chunk is one chain, Q K^T + Q S -> mask
// -> P V -> barrier -> state update -> state tile -> barrier, on every warp at once, with state, scores and
// outputs live together (about 240 registers a thread: 2 warps per scheduler), so the tensor pipe idles
// between phases (docs/perf.md, retention). Per chunk and CTA at D = 128, E = 64 (MMA m16n8k16 = 4096
// FLOP): output warps Q K^T 0.66 MFLOP (5/8 issued) + Q S 1.05 + P V 0.33 = 2.0 MFLOP, state warps 1.05
// MFLOP: the chunk's critical path is the output side's 2.0 MFLOP instead of 3.1; the state and the outputs
// do not share registers (at most 128 a thread: 2 CTAs of 8 warps, 4 warps per scheduler); K's decay is
// applied to its fragments, not by a shared-memory read-modify-write.
// Shared-memory traffic per chunk and CTA, ~260 KB (Q 16 + 16: Q K^T and Q S load it apart; K 40 + 16, S 64,
// V 20 + 32, state tile 16, copies 40), is the largest remaining term: ~4 200 cycles per SM for its 2 CTAs at
// 128 B/cycle, against ~2 400 of mma.sync issue (the single-chain chunk measured ~12 000). What stays serial is the
// causal skew of the output warps (warp w issues 16(w+1) + 64 + 8(w+1) MMAs, warp 3 160, a state warp 64),
// which the scheduler that holds warp 3 of both CTAs feels most.
//
// Segments (retention_params.hpp): when B * H * slices CTAs are too few for the GPU, the sequence is
// cut into segments; a first launch (state_only) computes each segment's own state with the state
// update alone (the output warps only load), and the second starts segment s from S0 and the states of
// segments < s.
//
// Backward launches (retention_jobs.hpp). The backward is three jobs of this kernel (dQ, dK, dV). Run in turn, each
// job fills the GPU alone: with few (batch, head) pairs each needs segments and its own state-only launch. The joint
// launch (retention_chunk_jobs_kernel) puts the jobs that share an instance (all three when Dk == Dv) in one grid, so
// that their CTAs fill the GPU together and need fewer segments: the same FLOPs and DRAM bytes per job as below, minus
// the state-only passes it no longer needs. Wave model (132 SMs, 2 CTAs each = 264 at once; unit: one chunk step of a
// CTA; a state-only step counted as half, its state warps alone), bf16 D = Dv, E = 64, in turn -> joint:
//   B8 T4096 H16 D128   3 x 256 CTAs x 64 steps               192 -> 192 (no change predicted)
//   B2 T16384 H16 D128  3 x (256 CTAs x 64 steps + states)    288 -> 256 (192 CTAs, 1 segment: -11 %)
//   B8 T4096 H16 D64    3 x (256 CTAs x 32 steps + states)    144 -> 128 (384 CTAs, 1 segment: -11 %)
//   B2 T16384 H16 D64   3 x (256 CTAs x 32 steps + states)    144 -> 144 (768 CTAs, 8 segments)
// plus two launch gaps fewer. The alternative, one reverse walk for dK and dV (both carry dLoss/dS, [Dk, Dv] up to a
// transpose), with a CTA per E-column slice of dS: it writes dV's slice and a partial dK = sum over slices of
// (mask o V_s dO_s^T) Q + V_s dS_s^T, so dK needs a cross-slice sum (fp32 partials: 2 slices x 4 D bytes per token and
// head written and read again, against 2 D bytes of a bf16 dK). Per token and head at D = 128, two slices: the state
// update once (2 x 16.4 kFLOP) and six products (2 x 63.5 kFLOP), 160 kFLOP against 193 kFLOP for the two jobs
// (-17 %), i.e. -11 % of the whole backward (289 kFLOP), before the partials' traffic; the output warps would hold
// a 16 x D fp32 dK block beside the 16 x E dV block (64 + 32 registers a thread), past the 128-register budget of
// two CTAs per SM. Neither reaches the issue's 2x fla backward, which at B8 T4096 H16 D128 asks ~0.76 ms where three
// walks of this kernel's forward take ~1.2 ms (docs/perf.md): that needs fewer FLOPs per walk on faster MMAs.
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
// Q, K [2 stages][C][D+8], V [2][C][E+8], S [D][E+8]: 104 KiB at D = 128, E = 64 (2 CTAs per SM on SM90,
// 1 on SM80), 64.5 KiB at D = 64.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/named_barrier.cuh"
#include "cuda/retention/retention_decay.cuh"
#include "cuda/retention/retention_fragments.cuh"
#include "cuda/retention/retention_mma.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim, int ValueBlock>
struct ChunkTraits {
  static constexpr int kChunk = 64;
  static constexpr int kOutputWarps = 4;  // warps 0..3: 16 chunk rows each
  static constexpr int kStateWarps = 4;   // warps 4..7: HeadDim / 4 state rows each
  static constexpr int kWarps = kOutputWarps + kStateWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kQkPitch = HeadDim + 8;
  static constexpr int kVPitch = ValueBlock + 8;
  static constexpr int kStateRowsPerWarp = HeadDim / kStateWarps;
  static constexpr int kStateMTiles = kStateRowsPerWarp / 16;
  static constexpr int kValueNTiles = ValueBlock / 8;
  static constexpr int kQkStage = kChunk * kQkPitch;
  static constexpr int kVStage = kChunk * kVPitch;
  static constexpr int kSharedElements = 4 * kQkStage + 2 * kVStage + HeadDim * kVPitch;
  static constexpr int kSharedBytes = kSharedElements * static_cast<int>(sizeof(Element));
  // Two CTAs per SM where the compiled architecture's shared memory holds two (1 KiB a CTA reserved): then at
  // most 128 registers a thread. SM90 (228 KiB) takes two at every instance; SM80 (164 KiB) at D = 64 only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kSharedBytesPerSm = 164 * 1024;
#else
  static constexpr int kSharedBytesPerSm = 228 * 1024;
#endif
  static constexpr int kMinBlocksPerSm = resident_ctas(kSharedBytes, kSharedBytesPerSm);
  // Named barriers (0 is __syncthreads): a chunk's tiles and the state tile are ready (all warps); the output
  // warps have read the state tile, which the state warps may then overwrite.
  static constexpr int kChunkReadyBarrier = 1;
  static constexpr int kStateTileReadBarrier = 2;
  static_assert(HeadDim % 64 == 0, "each state warp's rows are whole 16-row MMA tiles");
  static_assert(ValueBlock % 16 == 0, "value columns come in pairs of 8-wide MMA tiles");
};

// Rows [t0, t0 + kChunk) x `Cols` columns starting at `col0` of one (batch, head) sequence operand into
// a shared tile; rows at or past `tokens` become zeros. `Threads` threads share the copies, `thread` being this
// one's index among them (by default the CTA's threads). Rolled: one copy per loop trip, so that a caller short of
// registers does not hold every copy's addresses (or, unaligned, every loaded element) at once.
// With 16-byte copies and Threads a multiple of the copies per row, a thread copies the same column of rows
// Threads / (Cols / 8) apart: its source and destination advance by constants and the row test is one 32-bit
// compare, about 8 instructions a copy (the generic index arithmetic, 64-bit, took 38).
template <class Element, int Cols, int Pitch, int Threads, bool Rolled = false>
__device__ __forceinline__ void load_rows(Element* tile, const Element* head_base, int64_t token_stride, int64_t t0,
                                          int64_t tokens, bool vector_access,
                                          int thread = static_cast<int>(threadIdx.x)) {
  constexpr int kRows = 64;
  constexpr int kVectorsPerRow = Cols / 8;
  constexpr int kRowStep = Threads / kVectorsPerRow;
  if constexpr (Threads % kVectorsPerRow == 0 && kRowStep <= kRows && kRows % kRowStep == 0) {
    if (vector_access) {
      // Rows of this chunk that exist, 0..64.
      const int rows = static_cast<int>(tokens - t0 < kRows ? (tokens > t0 ? tokens - t0 : 0) : kRows);
      const int row = thread / kVectorsPerRow;
      const int col = (thread % kVectorsPerRow) * 8;
      const Element* source = head_base + (t0 + row) * token_stride + col;
      const int64_t source_step = kRowStep * token_stride;
      uint32_t destination = shared_address(tile + row * Pitch + col);
      constexpr uint32_t kDestinationStep = kRowStep * Pitch * sizeof(Element);
      // Trips whose row exists: the first ones.
      const int valid_trips = rows > row ? (rows - row + kRowStep - 1) / kRowStep : 0;
      auto copy = [&](int trip) {
        const bool valid = trip < valid_trips;
        copy_16_bytes_async(destination, valid ? source : head_base, valid);
        source += source_step;
        destination += kDestinationStep;
      };
      if constexpr (Rolled) {
#pragma unroll 1
        for (int trip = 0; trip < kRows / kRowStep; ++trip) copy(trip);
      } else {
#pragma unroll
        for (int trip = 0; trip < kRows / kRowStep; ++trip) copy(trip);
      }
      return;
    }
  }
  if (vector_access) {
    auto copy = [&](int i) {
      const int r = i / kVectorsPerRow;
      const int c = (i % kVectorsPerRow) * 8;
      const bool valid = t0 + r < tokens;
      const Element* source = valid ? head_base + (t0 + r) * token_stride + c : head_base;
      copy_16_bytes_async(shared_address(tile + r * Pitch + c), source, valid);
    };
    if constexpr (Rolled) {
#pragma unroll 1
      for (int i = thread; i < kRows * kVectorsPerRow; i += Threads) copy(i);
    } else {
      for (int i = thread; i < kRows * kVectorsPerRow; i += Threads) copy(i);
    }
  } else {
    auto copy = [&](int i) {
      const int r = i / Cols;
      const int c = i % Cols;
      tile[r * Pitch + c] = t0 + r < tokens ? head_base[(t0 + r) * token_stride + c] : Element(0.0f);
    };
    if constexpr (Rolled) {
#pragma unroll 1
      for (int i = thread; i < kRows * Cols; i += Threads) copy(i);
    } else {
      for (int i = thread; i < kRows * Cols; i += Threads) copy(i);
    }
  }
}

// x * (lo, hi) on a register of two 16-bit elements, rounded back to 16 bits.
template <class Element>
__device__ __forceinline__ uint32_t scale_pair(uint32_t bits, float lo, float hi) {
  const float2 pair = unpack_pair<Element>(bits);
  return pack_pair<Element>(pair.x * lo, pair.y * hi);
}

// The output warps' part of one chunk: O = diag(scale * gamma^(i+1)) Q S + P V for rows 16 warp .. 16 warp + 15,
// written to out rows below `length`. Arrives at the state-tile barrier as soon as Q S has read the state tile.
template <class Traits, class Element>
__device__ __forceinline__ void chunk_outputs(const Element* q_tile, const Element* k_tile, const Element* v_tile,
                                              const Element* state_tile, Element* out_rows, int64_t out_token,
                                              int length, float scale, float log2_gamma, bool vector_access, int warp,
                                              int lane) {
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kVPitch = Traits::kVPitch;
  constexpr int kNT = Traits::kValueNTiles;
  constexpr int kHeadDim = kQkPitch - 8;
  const int g = lane / 4;
  const int quad = lane % 4;
  const int row_lo = warp * 16 + g;  // the thread's two chunk rows: row_lo and row_lo + 8

  // Scores of the warp's 16 rows against the chunk's keys, masked with the decay and packed to 16 bits: the
  // fp32 scores are dead before Q S's accumulators live (both at once would not fit 128 registers).
  uint32_t probabilities[4][4];
  {
    float scores[8][4];
    zero_tiles(scores);
    // The unroll counts of this file's k-step loops are the largest that keep every instance within 128 registers
    // without spills (ptxas -v, SM90, both element types).
#pragma unroll 1
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      mma_rows_k_step<Element>(scores, q_tile, kQkPitch, k_tile, kQkPitch, ks, warp, lane,
                               [&](int np) { return np <= warp; });  // keys <= the warp's last row
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row_lo + 8 * (e / 2);
        const int j = nt * 8 + 2 * quad + e % 2;
        scores[nt][e] = masked_decayed_score(scores[nt][e], log2_gamma, i, j, scale);
      }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) score_a_fragment<Element>(probabilities[ks], scores, ks);
  }
  // Q S for the warp's output rows.
  float out[kNT][4];
  zero_tiles(out);
#pragma unroll 2
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    uint32_t a[4];
    ldmatrix_x4(a, a_rows(q_tile, kQkPitch, warp * 16, ks * 16, lane));
    mma_kn_tile<Element>(out, a, state_tile, kVPitch, ks * 16, lane);
  }
  // The state tile is read (the registers hold every fragment of it): the state warps may overwrite it.
  named_barrier_arrive(Traits::kStateTileReadBarrier, Traits::kThreads);
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
  // + P V.
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    if (ks <= warp) mma_kn_tile<Element>(out, probabilities[ks], v_tile, kVPitch, ks * 16, lane);
  }
  // Output rows past the sequence's end are not written.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row_lo + 8 * half;
    if (i < length) {
      Element* row = out_rows + i * out_token;
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
}

// The state warps' part of one chunk: S <- gamma^L S + K~^T V on the warp's state rows, K~ = diag(gamma^(L-1-j)) K
// formed on the A fragments (rows j >= L are zeros in the tile and get factor 0, never an overflowed power).
template <class Traits, class Element, int MT, int NT>
__device__ __forceinline__ void chunk_state_update(float (&state)[MT][NT][4], const Element* k_tile,
                                                   const Element* v_tile, int length, float log2_gamma, int state_row0,
                                                   int lane) {
  constexpr int kQkPitch = Traits::kQkPitch;
  constexpr int kVPitch = Traits::kVPitch;
  const int quad = lane % 4;
  const float chunk_decay = decay_power(log2_gamma, static_cast<float>(length));
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) state[mt][nt][e] *= chunk_decay;
#pragma unroll 2
  for (int ks = 0; ks < 4; ++ks) {
    // The A fragment's token (k) columns of this lane: j, j + 1 (regs 0, 1) and j + 8, j + 9 (regs 2, 3).
    const int j = ks * 16 + 2 * quad;
    float factor[4];
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int token = j + (f / 2) * 8 + f % 2;
      factor[f] = token < length ? decay_power(log2_gamma, static_cast<float>(length - 1 - token)) : 0.0f;
    }
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ldmatrix_x4_trans(a[mt], a_rows_km(k_tile, kQkPitch, ks * 16, state_row0 + mt * 16, lane));
      a[mt][0] = scale_pair<Element>(a[mt][0], factor[0], factor[1]);
      a[mt][1] = scale_pair<Element>(a[mt][1], factor[0], factor[1]);
      a[mt][2] = scale_pair<Element>(a[mt][2], factor[2], factor[3]);
      a[mt][3] = scale_pair<Element>(a[mt][3], factor[2], factor[3]);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bv[4];
      ldmatrix_x4_trans(bv, b_rows_kn(v_tile, kVPitch, ks * 16, np * 16, lane));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816<Element>(state[mt][2 * np], a[mt], bv[0], bv[1]);
        mma_16816<Element>(state[mt][2 * np + 1], a[mt], bv[2], bv[3]);
      }
    }
  }
}

// One CTA's walk: CTA `cta` of job `p` (its index among the job's CTAs).
template <class Element, int HeadDim, int ValueBlock>
__device__ __forceinline__ void chunk_walk(const ChunkParams& p, int64_t cta) {
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
  const int slice = static_cast<int>(cta % p.dv_slices);
  const int64_t segment_index = cta / p.dv_slices;
  const int segment = static_cast<int>(segment_index % p.segments);
  const int64_t head_index = segment_index / p.segments;
  const int h = static_cast<int>(head_index % p.heads);
  const int64_t b = head_index / p.heads;
  const bool state_only = p.state_only != 0;
  if (state_only && segment == p.segments - 1) return;  // the last segment's own state is never needed

  const float log2_gamma = head_log2_gamma(p, h);
  const float gamma = exp2f(log2_gamma);
  const float scale = p.scale;

  const int64_t segment_begin = segment * p.segment_tokens;
  const int64_t tokens = p.tokens < segment_begin + p.segment_tokens ? p.tokens : segment_begin + p.segment_tokens;
  const bool vector_access = p.vector_access != 0;

  const int64_t chunks = tokens > segment_begin ? (tokens - segment_begin + C - 1) / C : 0;
  auto chunk_length = [&](int64_t chunk) {
    const int64_t t0 = segment_begin + chunk * C;
    return static_cast<int>(tokens - t0 < C ? tokens - t0 : C);
  };

  // The state-only launch has no outputs: its output warps leave, and the state warps synchronise among themselves.
  const int ready_threads = state_only ? Traits::kStateWarps * 32 : Traits::kThreads;
  if (warp < Traits::kOutputWarps) {
    if (state_only) return;
    auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + b * p.out.batch + h * p.out.head +
                     static_cast<int64_t>(slice) * ValueBlock;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      named_barrier_sync(Traits::kChunkReadyBarrier, Traits::kThreads);  // the chunk's tiles and the state tile
      const int stage = static_cast<int>(chunk & 1);
      const int64_t t0 = segment_begin + chunk * C;
      chunk_outputs<Traits>(q_tiles + stage * Traits::kQkStage, k_tiles + stage * Traits::kQkStage,
                            v_tiles + stage * Traits::kVStage, state_tile, out_base + t0 * p.out.token, p.out.token,
                            chunk_length(chunk), scale, log2_gamma, vector_access, warp, lane);
    }
    return;
  }

  // State warps. They also issue every copy (the output warps, with the most MMAs, keep their registers for them).
  constexpr int kLoaders = Traits::kStateWarps * 32;
  const auto* q_base = static_cast<const Element*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + b * p.k.batch + h * p.k.head;
  const auto* v_base =
      static_cast<const Element*>(p.v.data) + b * p.v.batch + h * p.v.head + static_cast<int64_t>(slice) * ValueBlock;
  const int loader = static_cast<int>(threadIdx.x) - Traits::kOutputWarps * 32;
  auto load_chunk = [&](int64_t chunk, int stage) {
    const int64_t t0 = segment_begin + chunk * C;
    if (!state_only) {
      load_rows<Element, HeadDim, kQkPitch, kLoaders, true>(q_tiles + stage * Traits::kQkStage, q_base, p.q.token, t0,
                                                            tokens, vector_access, loader);
    }
    load_rows<Element, HeadDim, kQkPitch, kLoaders, true>(k_tiles + stage * Traits::kQkStage, k_base, p.k.token, t0,
                                                          tokens, vector_access, loader);
    load_rows<Element, ValueBlock, kVPitch, kLoaders, true>(v_tiles + stage * Traits::kVStage, v_base, p.v.token, t0,
                                                            tokens, vector_access, loader);
  };
  if (chunks > 0) load_chunk(0, 0);
  commit_async_copies();

  // Element (mt, nt, e) of the warp's state is row state_row0 + mt*16 + g + 8*(e/2),
  // column nt*8 + 2*quad + e%2 of the slice.
  const int state_row0 = (warp - Traits::kOutputWarps) * Traits::kStateRowsPerWarp;
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
  if (!state_only) store_state_tile();  // read by chunk 0's output warps after its first barrier

  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    // The chunk's tiles visible to all warps, then the next chunk's copies into the other stage, which every warp
    // finished with before this barrier.
    wait_async_copies<0>();
    named_barrier_sync(Traits::kChunkReadyBarrier, ready_threads);
    if (chunk + 1 < chunks) load_chunk(chunk + 1, static_cast<int>((chunk + 1) & 1));
    commit_async_copies();
    const int stage = static_cast<int>(chunk & 1);
    chunk_state_update<Traits>(state, k_tiles + stage * Traits::kQkStage, v_tiles + stage * Traits::kVStage,
                               chunk_length(chunk), log2_gamma, state_row0, lane);
    if (!state_only) {
      // The next chunk's output warps read the new state after its first barrier; this chunk's have read the old.
      named_barrier_sync(Traits::kStateTileReadBarrier, Traits::kThreads);
      store_state_tile();
    }
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

// One job: CTA blockIdx.x of p.
template <class Element, int HeadDim, int ValueBlock>
__global__ void __launch_bounds__(ChunkTraits<Element, HeadDim, ValueBlock>::kThreads,
                                  ChunkTraits<Element, HeadDim, ValueBlock>::kMinBlocksPerSm)
    retention_chunk_kernel(const __grid_constant__ ChunkParams p) {
  chunk_walk<Element, HeadDim, ValueBlock>(p, blockIdx.x);
}

// Several jobs of this instance in one grid (the backward's jobs that share it), their CTAs one after the other. The
// job's params are read through a reference into the grid-constant parameter space (no copy per thread); the
// dynamic job index costs a few registers against the one-job kernel (ptxas: at most 20 bytes of spills at SM90).
template <class Element, int HeadDim, int ValueBlock>
__global__ void __launch_bounds__(ChunkTraits<Element, HeadDim, ValueBlock>::kThreads,
                                  ChunkTraits<Element, HeadDim, ValueBlock>::kMinBlocksPerSm)
    retention_chunk_jobs_kernel(const __grid_constant__ ChunkJobs jobs) {
  const int64_t cta = blockIdx.x;
  const JobCta at = job_cta(jobs, cta);
  chunk_walk<Element, HeadDim, ValueBlock>(jobs.jobs[at.job], at.cta);
}

}  // namespace attnkit::cuda::retention
