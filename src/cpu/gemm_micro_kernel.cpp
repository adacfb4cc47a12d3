// GEMM micro-kernels, MR x NR accumulators held in registers as 32-byte vectors (GCC/Clang vector
// extensions): each step of the depth loop loads one row of the packed B sliver, broadcasts the MR
// values of packed A, and does MR x (NR / lanes) vector multiply-adds. On x86-64 with GCC the
// kernel is compiled several times (AVX-512, AVX2+FMA, baseline SSE2) and the loader picks the
// best the CPU has, so a generic build still runs at AVX speed; fused multiply-add is allowed for
// the kernel only (it is exactly what an accumulating GEMM wants).
#include "cpu/gemm_micro_kernel.hpp"

#include <cstring>

namespace attnkit::cpu::gemm_detail {
namespace {

template <typename T>
struct Vector32;
template <>
struct Vector32<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Vector32<double> {
  typedef double type __attribute__((vector_size(32)));
};

template <typename T>
__attribute__((always_inline)) inline void tile_kernel(int64_t kc, const T* a, const T* b, T* c, int64_t ldc,
                                                       bool accumulate) {
  using V = typename Vector32<T>::type;
  constexpr int64_t lanes = static_cast<int64_t>(32 / sizeof(T));
  constexpr int64_t mr = MicroTile<T>::rows;
  constexpr int64_t nv = MicroTile<T>::cols / lanes;
  V acc[mr][nv] = {};
  for (int64_t p = 0; p < kc; ++p) {
    V bv[nv];
    for (int64_t v = 0; v < nv; ++v) std::memcpy(&bv[v], b + v * lanes, sizeof(V));
    for (int64_t r = 0; r < mr; ++r) {
      const V ar = a[r] - V{};  // a broadcast: x - (+0) == x for every x, so this folds away (x + 0 would not)
      for (int64_t v = 0; v < nv; ++v) acc[r][v] += ar * bv[v];
    }
    a += mr;
    b += nv * lanes;
  }
  for (int64_t r = 0; r < mr; ++r) {
    for (int64_t v = 0; v < nv; ++v) {
      T* dst = c + r * ldc + v * lanes;
      if (accumulate) {
        V old;
        std::memcpy(&old, dst, sizeof(V));
        acc[r][v] += old;
      }
      std::memcpy(dst, &acc[r][v], sizeof(V));
    }
  }
}

}  // namespace

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ATTNKIT_GEMM_KERNEL_VARIANTS \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("fp-contract=fast")))
#else
#define ATTNKIT_GEMM_KERNEL_VARIANTS
#endif

// The clones live in an anonymous namespace: GCC emits their ifunc resolvers with default
// visibility whatever -fvisibility says, and internal linkage keeps them out of libattnkit's ABI.
namespace {
ATTNKIT_GEMM_KERNEL_VARIANTS
void tile_kernel_f32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  tile_kernel(kc, a, b, c, ldc, accumulate);
}

ATTNKIT_GEMM_KERNEL_VARIANTS
void tile_kernel_f64(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, bool accumulate) {
  tile_kernel(kc, a, b, c, ldc, accumulate);
}
}  // namespace

void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  tile_kernel_f32(kc, a, b, c, ldc, accumulate);
}

void micro_kernel(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, bool accumulate) {
  tile_kernel_f64(kc, a, b, c, ldc, accumulate);
}

}  // namespace attnkit::cpu::gemm_detail
