// Where each lane points ldmatrix (retention_mma.cuh) to load the MMA fragments of the retention
// kernels from row-major shared tiles: pure index math, one function per fragment kind. ldmatrix.x4
// reads four 8x8 matrices whose row addresses come from lanes 0-7, 8-15, 16-23 and 24-31, and hands
// register m of every lane the row lane/4, columns 2*(lane%4).. of matrix m (transposed with .trans).
#pragma once

namespace attnkit::cuda::retention {

// The ldmatrix row each lane points at, for a 16x16 block at (row0, col0) of a row-major tile with
// `pitch` elements per row. Register order of each variant is given by the fragment it produces.
//
// A fragment of a row-major [m][k] tile: regs (m0,k0) (m0+8,k0) (m0,k0+8) (m0+8,k0+8).
template <class Element>
__device__ __forceinline__ const Element* a_rows(const Element* tile, int pitch, int row0, int col0, int lane) {
  return tile + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * pitch + col0 + (lane / 16) * 8;
}
// B fragments of two n-tiles from a tile stored [n][k] (rows are n): regs b0 b1 of n-tile n0, then of n0+8.
template <class Element>
__device__ __forceinline__ const Element* b_rows_nk(const Element* tile, int pitch, int n0, int k0, int lane) {
  return tile + (n0 + (lane % 8) + (lane / 16) * 8) * pitch + k0 + ((lane / 8) % 2) * 8;
}
// With .trans: B fragments of two n-tiles from a tile stored [k][n]: regs b0 b1 of n-tile n0, then of n0+8.
template <class Element>
__device__ __forceinline__ const Element* b_rows_kn(const Element* tile, int pitch, int k0, int n0, int lane) {
  return tile + (k0 + (lane % 8) + ((lane / 8) % 2) * 8) * pitch + n0 + (lane / 16) * 8;
}
// With .trans: the A fragment of the transpose of a tile stored [k][m].
template <class Element>
__device__ __forceinline__ const Element* a_rows_km(const Element* tile, int pitch, int k0, int m0, int lane) {
  return tile + (k0 + (lane % 8) + (lane / 16) * 8) * pitch + m0 + ((lane / 8) % 2) * 8;
}

}  // namespace attnkit::cuda::retention
