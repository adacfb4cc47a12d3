// Warp-level tensor-core pieces of the retention kernels (SM80+ mma.sync m16n8k16, fp32 accumulate):
// the MMA itself for fp16 and bf16, ldmatrix loads of A and B fragments from row-major shared tiles
// (plain or transposed), and packing two fp32 values into one register of 16-bit elements.
//
// Fragment ownership (PTX ISA, m16n8k16), with g = lane / 4 and q = lane % 4:
//   A 16x16: reg0 (g, 2q..2q+1), reg1 (g+8, 2q..), reg2 (g, 2q+8..), reg3 (g+8, 2q+8..);
//   B 16x8:  reg0 (k 2q..2q+1, n g), reg1 (k 2q+8.., n g);
//   C 16x8:  c0 c1 (g, 2q..2q+1), c2 c3 (g+8, 2q..2q+1).
// A C fragment pair of n-tiles (2s, 2s+1) is therefore the A fragment of k-step s, which is how scores
// become the left operand of the next product without leaving registers. Which shared-memory rows the
// lanes point ldmatrix at is in retention_fragments.cuh; the warp-tile products at the end use it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/retention/retention_fragments.cuh"

namespace attnkit::cuda::retention {

template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack_pair<__half>(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

template <>
__device__ __forceinline__ uint32_t pack_pair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

template <class Element>
__device__ __forceinline__ float2 unpack_pair(uint32_t bits);

template <>
__device__ __forceinline__ float2 unpack_pair<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

template <>
__device__ __forceinline__ float2 unpack_pair<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}

// acc += a * b for one 16x8x16 tile.
template <class Element>
__device__ __forceinline__ void mma_16816(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Zeroes a warp's N accumulator n-tiles.
template <int N>
__device__ __forceinline__ void zero_tiles(float (&acc)[N][4]) {
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
}

// The A fragment of k-step ks of a warp's 16x64 fp32 tile of scores (its n-tiles 2 ks and 2 ks + 1),
// packed to 16 bits.
template <class Element>
__device__ __forceinline__ void score_a_fragment(uint32_t (&a)[4], const float (&scores)[8][4], int ks) {
  a[0] = pack_pair<Element>(scores[2 * ks][0], scores[2 * ks][1]);
  a[1] = pack_pair<Element>(scores[2 * ks][2], scores[2 * ks][3]);
  a[2] = pack_pair<Element>(scores[2 * ks + 1][0], scores[2 * ks + 1][1]);
  a[3] = pack_pair<Element>(scores[2 * ks + 1][2], scores[2 * ks + 1][3]);
}

// One 16-wide k-step ks of a warp's 16x64 score tile: acc += A B^T, A the warp's rows 16 warp .. 16 warp + 15
// of a row-major [m][k] tile, B the 64 rows of a row-major [n][k] tile; the pairs of n-tiles np (columns
// 16 np .. 16 np + 15) for which visit(np) is false are skipped.
template <class Element, class Visit>
__device__ __forceinline__ void mma_rows_k_step(float (&acc)[8][4], const Element* a_tile, int a_pitch,
                                                const Element* b_tile, int b_pitch, int ks, int warp, int lane,
                                                Visit visit) {
  uint32_t a[4];
  ldmatrix_x4(a, a_rows(a_tile, a_pitch, warp * 16, ks * 16, lane));
#pragma unroll
  for (int np = 0; np < 4; ++np) {
    if (visit(np)) {
      uint32_t b[4];
      ldmatrix_x4(b, b_rows_nk(b_tile, b_pitch, np * 16, ks * 16, lane));
      mma_16816<Element>(acc[2 * np], a, b[0], b[1]);
      mma_16816<Element>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[2 np], acc[2 np + 1] += A B for the pairs of n-tiles np < pairs, B the rows k0 .. k0 + 15 of a row-major
// [k][n] tile (read transposed with ldmatrix.trans).
template <class Element, int N>
__device__ __forceinline__ void mma_kn_tile(float (&acc)[N][4], const uint32_t (&a)[4], const Element* tile, int pitch,
                                            int k0, int lane, int pairs = N / 2) {
#pragma unroll
  for (int np = 0; np < N / 2; ++np) {
    if (np < pairs) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_rows_kn(tile, pitch, k0, np * 16, lane));
      mma_16816<Element>(acc[2 * np], a, b[0], b[1]);
      mma_16816<Element>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace attnkit::cuda::retention
