// Shared-memory tables that make the element masking of a partial tile cheap.
//
// A thread owns kRows rows x kCols columns of each score tile; its allowed keys in one row are a
// kCols-bit mask. For box tiles, the keys a query allows in dimension d form an interval [lo, hi) of
// in-box coordinates, so the row's mask is the AND over dimensions of
//   prefix[d][hi] & ~prefix[d][lo],   prefix[d][c] = columns whose in-box coordinate along d is < c.
// The column set of a thread depends only on its lane within the quad (lane % 4: warps split rows,
// not columns), so the prefix masks are tabulated once per CTA for the 4 lane classes, 3 dimensions
// and c in [0, BlockN]: masking a partial tile then costs two shared loads and a few logic ops per
// row and dimension, plus one select per score.
#pragma once
#include <cstdint>

namespace attnkit::cuda::fmha {

// a[d] of a per-dimension array for a runtime d < 3, without indexing the array (a register array indexed at
// run time goes through local memory).
__device__ __forceinline__ int32_t at_dim(const int32_t (&a)[3], int d) {
  return d == 0 ? a[0] : (d == 1 ? a[1] : a[2]);
}

template <class Traits>
struct ColumnPrefixTable {
  static constexpr int kEntries = Traits::kPrefixEntries;  // BlockN + 1
  uint32_t* table;                                         // [4 lane classes][3 dims][kEntries]

  __device__ __forceinline__ uint32_t at(int lane_class, int d, int c) const {
    return table[(lane_class * 3 + d) * kEntries + c];
  }

  // Fills the entries c = 0 .. mask[d] + 1 of dimensions d < dims (a column's in-box coordinate along d
  // is (col >> shift[d]) & mask[d], so larger c repeat the last entry, and callers clamp c to the box:
  // the entries past it are never read). col_of[j] is this thread's j-th column; threads of one lane
  // class split the entries.
  __device__ __forceinline__ void build(const int (&col_of)[Traits::kCols], int dims, const int32_t (&shift)[3],
                                        const int32_t (&mask)[3], int tid) const {
    const int lane_class = tid % 4;
    constexpr int kPerClass = Traits::kThreads / 4;
    const int n0 = mask[0] + 2;
    const int n1 = dims > 1 ? mask[1] + 2 : 0;
    const int n2 = dims > 2 ? mask[2] + 2 : 0;
    for (int e = tid / 4; e < n0 + n1 + n2; e += kPerClass) {
      const int d = e < n0 ? 0 : (e < n0 + n1 ? 1 : 2);
      const int c = e - (d == 0 ? 0 : (d == 1 ? n0 : n0 + n1));
      const int32_t sh = at_dim(shift, d);
      const int32_t m = at_dim(mask, d);
      uint32_t bits = 0;
#pragma unroll
      for (int j = 0; j < Traits::kCols; ++j) {
        const int coordinate = (col_of[j] >> sh) & m;
        bits |= static_cast<uint32_t>(coordinate < c) << j;
      }
      table[(lane_class * 3 + d) * kEntries + c] = bits;
    }
  }
};

// Sets every score whose bit in its row's mask is clear to -inf.
template <int Rows, int Cols, class Scores>
__device__ __forceinline__ void apply_row_masks(Scores& s, const uint32_t (&masks)[Rows]) {
#pragma unroll
  for (int i = 0; i < Rows; ++i) {
#pragma unroll
    for (int j = 0; j < Cols; ++j) {
      if (!((masks[i] >> j) & 1u)) s(i, j) = -INFINITY;
    }
  }
}

}  // namespace attnkit::cuda::fmha
