// The register-blocked inner kernel of the CPU GEMM: an MR x NR tile of C from an MR-row sliver of
// packed A and an NR-column sliver of packed B over a depth of kc (layouts in gemm_pack.hpp).
#pragma once
#include <cstdint>

namespace attnkit::cpu::gemm_detail {

template <typename Acc>
struct MicroTile;
template <>
struct MicroTile<float> {
  static constexpr int64_t rows = 6;   // MR
  static constexpr int64_t cols = 16;  // NR: two 8-float vectors
};
template <>
struct MicroTile<double> {
  static constexpr int64_t rows = 6;
  static constexpr int64_t cols = 8;  // two 4-double vectors
};

// c[r * ldc + j] (= or +=) sum_p a[p * MR + r] * b[p * NR + j] for r < MR, j < NR. c is a full
// MR x NR tile of the driver's accumulation buffer; accumulate = false overwrites it.
void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);
void micro_kernel(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, bool accumulate);

}  // namespace attnkit::cpu::gemm_detail
