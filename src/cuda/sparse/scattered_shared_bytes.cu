// The shared memory per block of the scattered kernels, by compiled width: the dK/dV kernel's warp count on a given
// device and the least any direction needs (scattered_launch.hpp). Element types of 2 bytes share every figure.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/sparse/scattered_kernel_launch.cuh"

namespace attnkit::cuda::sparse {
namespace {

using Element = __nv_bfloat16;
static_assert(sizeof(__half) == sizeof(Element), "f16 and bf16 kernels share their shared memory sizes");

struct WidthBytes {
  int forward = 0;  // the cp.async kernel
  int dq = 0;
  int dkdv_wide = 0;    // kDkDvWarps
  int dkdv_narrow = 0;  // kDkDvNarrowWarps
  int wide_warps = 0;
};

template <int Width>
WidthBytes bytes_of() {
  return WidthBytes{ScatteredForwardTraits<Element, Width, kForwardWarps<Width>>::kSharedBytes,
                    ScatteredForwardTraits<Element, Width, kDqWarps<Width>>::kSharedBytes,
                    ScatteredKeyTraits<Element, Width, kDkDvWarps<Width>>::kSharedBytes,
                    ScatteredKeyTraits<Element, Width, kDkDvNarrowWarps>::kSharedBytes, kDkDvWarps<Width>};
}

WidthBytes bytes_of(int width) {
  switch (width) {
    case 32: return bytes_of<32>();
    case 64: return bytes_of<64>();
    default: return bytes_of<128>();
  }
}

}  // namespace

int scattered_dkdv_warps(int width, int max_shared_bytes) {
  const WidthBytes bytes = bytes_of(width);
  return bytes.dkdv_wide <= max_shared_bytes ? bytes.wide_warps : kDkDvNarrowWarps;
}

bool scattered_tma_fills_waves(int64_t ctas_tma, int64_t ctas_cp_async, int multiprocessors) {
  if (multiprocessors <= 0 || ctas_tma <= 0 || ctas_cp_async <= 0) return multiprocessors > 0;
  auto wave_fill = [&](int64_t ctas) {
    const int64_t waves = (ctas + multiprocessors - 1) / multiprocessors;
    return static_cast<double>(ctas) / static_cast<double>(waves * multiprocessors);
  };
  return wave_fill(ctas_tma) >= kTmaWaveFill * wave_fill(ctas_cp_async);
}

int scattered_least_shared_bytes(int width, bool backward) {
  const WidthBytes bytes = bytes_of(width);
  return backward ? std::max(bytes.dq, std::min(bytes.dkdv_wide, bytes.dkdv_narrow)) : bytes.forward;
}

}  // namespace attnkit::cuda::sparse
