// The scaled values of the Hopper chunkwise retention kernel's state update (retention_wgmma_chunk_kernel.cuh):
// V~ = diag(gamma^(L-1-j)) V of a chunk of L tokens, from the chunk's stage into a scaled-V tile, as 16-byte pieces
// shared among the threads of the role that scales (the output warpgroup of the chunk at D = 64, the state
// warpgroups elsewhere and in the state-only launch). A V row is a 128-byte swizzled row per 64 columns, so it is
// scaled in place of the swizzle; rows j >= L get factor 0, never an overflowed power.
#pragma once
#include <cstdint>

#include "cuda/fmha/fmha_operand_convert.cuh"
#include "cuda/retention/retention_decay.cuh"

namespace attnkit::cuda::retention {

// x * (lo, hi) on a word of two 16-bit elements, rounded back to 16 bits (the fp32 factor unrounded: a packed 16-bit
// multiply would round it to 16 bits too, the same relative error for every chunk's token j).
template <class Element>
__device__ __forceinline__ uint32_t wgmma_scale_pair(uint32_t bits, float factor) {
  return fmha::pack_pair<Element>(fmha::unpack_value<Element>(bits & 0xffffu) * factor,
                                  fmha::unpack_value<Element>(bits >> 16) * factor);
}

// Thread `tid` of `Threads` scaling threads: pieces tid + Threads k of the tile (8 pieces a 128-byte row, 64 rows a
// 64-column block). `kHold`: the factors of whole chunks (every chunk but a sequence's last) are held in registers.
template <class Traits, int Threads, bool kHold>
struct ValueScaling {
  using Element = typename Traits::Element;
  static constexpr int kPieces = Traits::kValueBlock * Traits::kChunk * 2 / 16 / Threads;
  static_assert(kPieces * Threads * 16 == Traits::kValueBlock * Traits::kChunk * 2, "whole pieces a thread");
  static constexpr int kStageWords = Traits::kVStageElements * 2 / 16;
  int tid;
  float log2_gamma;
  float whole_chunk_factors[kPieces];

  __device__ __forceinline__ ValueScaling(int tid_, float log2_gamma_) : tid(tid_), log2_gamma(log2_gamma_) {
    if constexpr (kHold) {
#pragma unroll
      for (int k = 0; k < kPieces; ++k) whole_chunk_factors[k] = factor(k, Traits::kChunk);
    }
  }
  // Piece k's factor gamma^(L - 1 - token), 0 past the chunk's end.
  __device__ __forceinline__ float factor(int k, int length) const {
    const int token = ((tid + Threads * k) / 8) % Traits::kChunk;
    return token < length ? decay_power(log2_gamma, static_cast<float>(length - 1 - token)) : 0.0f;
  }
  // The thread's pieces of stage `stage`'s V, scaled for a chunk of `length` tokens.
  __device__ __forceinline__ void load(const typename Traits::SharedStorage& ss, int stage, int length,
                                       uint4 (&scaled)[kPieces]) const {
    const auto* v_words = reinterpret_cast<const uint4*>(ss.v);
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const float f = kHold && length == Traits::kChunk ? whole_chunk_factors[k] : factor(k, length);
      const uint4 bits = v_words[stage * kStageWords + tid + Threads * k];
      scaled[k] = make_uint4(wgmma_scale_pair<Element>(bits.x, f), wgmma_scale_pair<Element>(bits.y, f),
                             wgmma_scale_pair<Element>(bits.z, f), wgmma_scale_pair<Element>(bits.w, f));
    }
  }
  // The pieces into scaled-V tile `tile`.
  __device__ __forceinline__ void store(typename Traits::SharedStorage& ss, int tile,
                                        const uint4 (&scaled)[kPieces]) const {
    auto* words = reinterpret_cast<uint4*>(ss.v_scaled[tile]);
#pragma unroll
    for (int k = 0; k < kPieces; ++k) words[tid + Threads * k] = scaled[k];
  }
};

}  // namespace attnkit::cuda::retention
