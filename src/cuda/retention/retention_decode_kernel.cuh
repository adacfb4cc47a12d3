// Recurrent retention for a few tokens against a carried state (decode), one forward job of
// retention_params.hpp (no segments, no gradient factors): S_t = gamma S_{t-1} + k_t^T v_t,
// o_t = scale * q_t S_t, token by token, in fp32 on CUDA cores.
//
// It is memory-bound: the state slice is read once and written once, q, k, v and o are T rows. One CTA
// of 256 threads owns one (batch, head, 64 state columns); thread (group, pair) = (warp, lane) holds
// columns 2*pair, 2*pair+1 of rows group, group+8, ... (Dk/8 rows, fp32 in registers), so each warp
// reads and writes whole 256-byte row segments of the state. Per token, q_t, k_t and the slice of v_t
// are staged in shared memory (fp32), every thread updates its state entries and its part of q_t S_t,
// and the 8 row groups' partial sums are added through shared memory.
//
// Per token and head: 4*Dk*Dv FLOPs (fp32 FMA) against 8*Dk*Dv bytes of state moved once per call,
// so for T <= kDecodeMaxTokens (retention_params.hpp) the state traffic (2 * 4 * Dk * Dv bytes) bounds the time.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/retention/retention_decay.cuh"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

template <class Element, int HeadDim>
struct DecodeTraits {
  static constexpr int kThreads = 256;
  static constexpr int kGroups = kThreads / 32;  // row groups (one per warp)
  static constexpr int kValueBlock = 64;         // two columns per lane
  static constexpr int kRowsPerThread = HeadDim / kGroups;
  // q and k rows, the v slice, and the groups' partial outputs (fp32).
  static constexpr int kSharedBytes = (2 * HeadDim + kValueBlock + kGroups * kValueBlock) * 4;
  static_assert(HeadDim % kGroups == 0, "whole rows per thread");
};

template <class Element, int HeadDim>
__global__ void __launch_bounds__(DecodeTraits<Element, HeadDim>::kThreads)
    retention_decode_kernel(const __grid_constant__ ChunkParams p) {
  using Traits = DecodeTraits<Element, HeadDim>;
  constexpr int kRows = Traits::kRowsPerThread;
  constexpr int kGroups = Traits::kGroups;
  constexpr int kValueBlock = Traits::kValueBlock;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* q_row = reinterpret_cast<float*>(shared_bytes);
  float* k_row = q_row + HeadDim;
  float* v_row = k_row + HeadDim;
  float* partial = v_row + kValueBlock;  // [kGroups][kValueBlock]

  const int group = static_cast<int>(threadIdx.x) / 32;
  const int pair = static_cast<int>(threadIdx.x) % 32;
  const int64_t cta = blockIdx.x;
  const int slice = static_cast<int>(cta % p.dv_slices);
  const int64_t head_index = cta / p.dv_slices;
  const int h = static_cast<int>(head_index % p.heads);
  const int64_t b = head_index / p.heads;

  const float log2_gamma = head_log2_gamma(p, h);
  const float gamma = exp2f(log2_gamma);
  const int col = 2 * pair;
  const int64_t column0 = static_cast<int64_t>(slice) * kValueBlock;

  float2 state[kRows];
  {
    const StateOperand& s0 = p.initial_state;
    const float* base = s0.data == nullptr ? nullptr : s0.data + b * s0.batch + h * s0.head + column0 * s0.col;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = group + kGroups * i;
      if (base == nullptr) {
        state[i] = make_float2(0.0f, 0.0f);
      } else if (s0.pairs) {
        state[i] = *reinterpret_cast<const float2*>(base + row * s0.row + col);
      } else {
        state[i] = make_float2(base[row * s0.row + col * s0.col], base[row * s0.row + (col + 1) * s0.col]);
      }
    }
  }

  const auto* q_base = static_cast<const Element*>(p.q.data) + b * p.q.batch + h * p.q.head;
  const auto* k_base = static_cast<const Element*>(p.k.data) + b * p.k.batch + h * p.k.head;
  const auto* v_base = static_cast<const Element*>(p.v.data) + b * p.v.batch + h * p.v.head + column0;
  auto* out_base = static_cast<Element*>(const_cast<void*>(p.out.data)) + b * p.out.batch + h * p.out.head + column0;

  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int i = static_cast<int>(threadIdx.x); i < 2 * HeadDim + kValueBlock; i += Traits::kThreads) {
      float value;
      if (i < HeadDim) {
        value = static_cast<float>(q_base[t * p.q.token + i]);
      } else if (i < 2 * HeadDim) {
        value = static_cast<float>(k_base[t * p.k.token + (i - HeadDim)]);
      } else {
        value = static_cast<float>(v_base[t * p.v.token + (i - 2 * HeadDim)]);
      }
      q_row[i] = value;  // q_row, k_row and v_row are consecutive
    }
    __syncthreads();
    const float v0 = v_row[col], v1 = v_row[col + 1];
    float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = group + kGroups * i;
      const float k = k_row[row], q = q_row[row];
      state[i].x = gamma * state[i].x + k * v0;
      state[i].y = gamma * state[i].y + k * v1;
      sum.x += q * state[i].x;
      sum.y += q * state[i].y;
    }
    partial[group * kValueBlock + col] = sum.x;
    partial[group * kValueBlock + col + 1] = sum.y;
    __syncthreads();
    if (threadIdx.x < kValueBlock) {
      const int c = static_cast<int>(threadIdx.x);
      float total = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) total += partial[g * kValueBlock + c];
      out_base[t * p.out.token + c] = static_cast<Element>(p.scale * total);
    }
    __syncthreads();  // the rows and partial sums are rewritten by the next token
  }

  if (p.final_state.data != nullptr) {
    const StateOperand& s1 = p.final_state;
    float* base = s1.data + b * s1.batch + h * s1.head + column0 * s1.col;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = group + kGroups * i;
      if (s1.pairs) {
        *reinterpret_cast<float2*>(base + row * s1.row + col) = state[i];
      } else {
        base[row * s1.row + col * s1.col] = state[i].x;
        base[row * s1.row + (col + 1) * s1.col] = state[i].y;
      }
    }
  }
}

}  // namespace attnkit::cuda::retention
