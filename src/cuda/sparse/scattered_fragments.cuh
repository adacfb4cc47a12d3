// Warp-level tensor-core pieces of the scattered kernels: mma.sync m16n8k16 (fp32 accumulate), ldmatrix
// of gathered rows (every lane names the shared row it supplies, so eight arbitrary key or query rows
// form one 8x8 matrix), fp32 -> fp16/bf16 packing, and A fragments read straight from global memory.
//
// Fragment layouts (g = lane / 4, t = lane % 4), as the PTX ISA defines them for m16n8k16:
//   A 16x16: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8:  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C 16x8:  c0 c1 (g, 2t and 2t+1), c2 c3 (g+8, 2t and 2t+1)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

template <class Element>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<Element, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 matrices; lane l supplies the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <class Element>
__device__ __forceinline__ void store_pair(Element* destination, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(destination) = pack_pair<Element>(lo, hi);
}

// Packs a 16 x 16 block of fp32 results (two C fragments of 8 columns) into the A fragment of the next
// mma: the C layout of the two n-blocks is the A layout of one k-step.
template <class Element>
__device__ __forceinline__ void pack_a_fragment(uint32_t (&a)[4], const float (&c)[2][4]) {
  a[0] = pack_pair<Element>(c[0][0], c[0][1]);
  a[1] = pack_pair<Element>(c[0][2], c[0][3]);
  a[2] = pack_pair<Element>(c[1][0], c[1][1]);
  a[3] = pack_pair<Element>(c[1][2], c[1][3]);
}

// Zeroes an fp32 accumulator of C fragments (n-blocks of 8 columns, Width columns).
template <int Width>
__device__ __forceinline__ void zero_c_fragments(float (&c)[Width / 8][4]) {
#pragma unroll
  for (int i = 0; i < Width / 8; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// 2^x with the MUFU unit's approximation (2 ulp; -inf -> 0), without exp2f's denormal scaling: the
// arguments are scores minus a row maximum or an lse, whose results below 2^-126 do not matter.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A fragments (k-steps of 16 columns, Width columns) of rows first_row .. first_row + 15 of a
// [B, *tokens, H, X] tensor; rows at or past `rows` and columns at or past `columns` read as 0.
template <class Element, int Width>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[Width / 16][4], const SequenceTensor& tensor,
                                                 int32_t batch, int32_t head, int32_t first_row, int32_t rows,
                                                 int32_t columns, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  const Element* base = static_cast<const Element*>(tensor.data);
  const Element* row_lo = first_row + g < rows ? base + tensor.offset(batch, first_row + g, head) : nullptr;
  const Element* row_hi = first_row + g + 8 < rows ? base + tensor.offset(batch, first_row + g + 8, head) : nullptr;
  auto pair = [&](const Element* row, int column) -> uint32_t {
    return row != nullptr && column < columns ? *reinterpret_cast<const uint32_t*>(row + column) : 0u;
  };
#pragma unroll
  for (int step = 0; step < Width / 16; ++step) {
    const int column = step * 16 + 2 * t;
    a[step][0] = pair(row_lo, column);
    a[step][1] = pair(row_hi, column);
    a[step][2] = pair(row_lo, column + 8);
    a[step][3] = pair(row_hi, column + 8);
  }
}

// Writes C fragments (n-blocks of 8 columns) of rows first_row .. first_row + 15, times `factor_lo` /
// `factor_hi` per row, into a [B, *tokens, H, X] tensor: rows below `rows`, columns below `columns`.
template <class Element, int Width>
__device__ __forceinline__ void store_c_fragments(const float (&c)[Width / 8][4], const SequenceTensor& tensor,
                                                  int32_t batch, int32_t head, int32_t first_row, int32_t rows,
                                                  int32_t columns, float factor_lo, float factor_hi, int lane) {
  const int g = lane / 4;
  const int t = lane % 4;
  Element* base = static_cast<Element*>(tensor.data);
  Element* row_lo = first_row + g < rows ? base + tensor.offset(batch, first_row + g, head) : nullptr;
  Element* row_hi = first_row + g + 8 < rows ? base + tensor.offset(batch, first_row + g + 8, head) : nullptr;
#pragma unroll
  for (int block = 0; block < Width / 8; ++block) {
    const int column = block * 8 + 2 * t;
    if (column >= columns) continue;
    if (row_lo != nullptr) store_pair(row_lo + column, c[block][0] * factor_lo, c[block][1] * factor_lo);
    if (row_hi != nullptr) store_pair(row_hi + column, c[block][2] * factor_hi, c[block][3] * factor_hi);
  }
}

}  // namespace attnkit::cuda::sparse
