// Host-side launch of the scattered kernels for one element type: grid shapes, the dynamic shared
// memory opt-in (once per kernel and device), and the width / warp-count choice per kernel. Included by
// the per-dtype .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/sparse/scattered_backward_dkdv_kernel.cuh"
#include "cuda/sparse/scattered_backward_dq_kernel.cuh"
#include "cuda/sparse/scattered_forward_kernel.cuh"
#include "cuda/sparse/scattered_launch.hpp"
#include "cuda/sparse/scattered_tma_pipeline.cuh"

namespace attnkit::cuda::sparse {

// Warps per CTA: more rows per CTA read the other side's tiles from L2 fewer times (the forward and dQ kernels
// stream K and V once per CTA of query rows, the dK/dV kernel Q and dO once per CTA of keys). At widths up to 64
// the forward and backward kernels run 16 warps in 128 registers a thread (the dK/dV kernel spills a few scalars of
// its list walk there), the dK/dV kernel only where the device's shared memory per block holds it (else 8 warps,
// scattered_dkdv_warps); the wider kernels keep 8.
template <int Width>
inline constexpr int kForwardWarps = Width <= 64 ? 16 : 8;
template <int Width>
inline constexpr int kDqWarps = Width <= 64 ? 16 : 8;
template <int Width>
inline constexpr int kDkDvWarps = Width <= 64 ? 16 : 8;
// The dK/dV kernel where the device's shared memory per block holds no more (scattered_dkdv_warps).
inline constexpr int kDkDvNarrowWarps = 8;
// The producer-warp forms (forward, dQ and dK/dV on sm_90 at width 64): 15 walking warps and the producer, 512 threads
// in 128 registers each.
inline constexpr int kTmaWarps = 15;

static_assert(kScatteredTile<32> == 256 && kScatteredTile<64> == 256 && kScatteredTile<128> == 128,
              "scattered_tile_columns (scattered_launch.hpp) names the kernels' tile");

// Whether `kernel`'s sm_90 code is in the binary (a launcher reads it once per kernel); false without a usable device.
inline bool has_sm90_code(const void* kernel) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();  // this call's own error, cleared: the cp.async form runs instead
    return false;
  }
  return attributes.binaryVersion >= 90;
}

// The producer-warp form (scattered_tma_pipeline.cuh) of the forward (Base ScatteredForwardParams) or of the dQ kernel
// (ScatteredBackwardParams) where its sm_90 code is in the binary and TMA can express the K / V tiles; false
// otherwise (nothing launched).
template <class Element, class Base>
bool launch_tma_form(const Base& p, int32_t batch, cudaStream_t stream) {
  constexpr int kWarps = kTmaWarps;
  constexpr bool kForward = std::is_same_v<Base, ScatteredForwardParams>;
  using Traits = ScatteredTmaTraits<Element, kWarps>;
  using Rows = std::conditional_t<kForward, ScatteredForwardRows<Element, kTmaTileColumns>,
                                  ScatteredGradQRows<Element, kTmaTileColumns>>;
  auto* kernel = scattered_tma_rows_kernel<Element, kWarps, Rows, Base>;
  static const bool compiled_for_sm90 = has_sm90_code(reinterpret_cast<const void*>(kernel));
  ScatteredTmaParams<Base> tp;
  if (!compiled_for_sm90 || !make_scattered_key_value_maps(p, batch, tp)) return false;
  check_cuda(raise_dynamic_shared_memory_once(kernel, Traits::kSharedBytes),
             kForward ? "scattered forward (TMA) shared memory" : "scattered dQ (TMA) shared memory");
  const dim3 grid((p.seq_q + Traits::kRows - 1) / Traits::kRows, p.heads_q, batch);
  if (grid.x == 0) return true;  // no query: no row to write
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(tp);
  check_launch(kForward ? "scattered_tma_rows_kernel (forward)" : "scattered_tma_rows_kernel (dQ)");
  return true;
}

template <class Element, int Width>
void launch_forward_width(const ScatteredForwardParams& p, int32_t batch, bool hopper, cudaStream_t stream) {
  if constexpr (Width == kTmaTileColumns) {
    if (hopper && launch_tma_form<Element>(p, batch, stream)) return;
  }
  constexpr int kWarps = kForwardWarps<Width>;
  using Traits = ScatteredForwardTraits<Element, Width, kWarps>;
  auto* kernel =
      scattered_rows_kernel<Element, Width, kWarps, ScatteredForwardRows<Element, Width>, ScatteredForwardParams>;
  check_cuda(raise_dynamic_shared_memory_once(kernel, Traits::kSharedBytes), "scattered forward shared memory");
  const dim3 grid((p.seq_q + Traits::kRows - 1) / Traits::kRows, p.heads_q, batch);
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(p);
  check_launch("scattered_rows_kernel (forward)");
}

template <class Element, int Width, int Warps>
void launch_dkdv(const ScatteredBackwardParams& p, cudaStream_t stream) {
  using Traits = ScatteredKeyTraits<Element, Width, Warps>;
  auto* kernel = scattered_backward_dkdv_kernel<Element, Width, Warps>;
  check_cuda(raise_dynamic_shared_memory_once(kernel, Traits::kSharedBytes), "scattered dK/dV shared memory");
  const dim3 grid((p.seq_k + Traits::kRows - 1) / Traits::kRows, p.heads_q / p.heads_per_kv, p.batch);
  if (grid.x == 0) return;
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(p);
  check_launch("scattered_backward_dkdv_kernel");
}

// The producer-warp form of the dK/dV kernel (scattered_tma_pipeline.cuh) where its sm_90 code is in the binary and
// TMA can express the Q / dO tiles and the lse2 / delta rows; false otherwise (nothing launched).
template <class Element>
bool launch_dkdv_tma(const ScatteredBackwardParams& p, cudaStream_t stream) {
  constexpr int kWarps = kTmaWarps;
  using Traits = ScatteredTmaKeyTraits<Element, kWarps>;
  auto* kernel = scattered_backward_dkdv_tma_kernel<Element, kWarps>;
  static const bool compiled_for_sm90 = has_sm90_code(reinterpret_cast<const void*>(kernel));
  ScatteredTmaKeyParams tp;
  if (!compiled_for_sm90 || !make_scattered_query_maps(p, tp)) return false;
  check_cuda(raise_dynamic_shared_memory_once(kernel, Traits::kSharedBytes), "scattered dK/dV (TMA) shared memory");
  const dim3 grid((p.seq_k + Traits::kRows - 1) / Traits::kRows, p.heads_q / p.heads_per_kv, p.batch);
  if (grid.x == 0) return true;  // no key: no row to write
  kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(tp);
  check_launch("scattered_backward_dkdv_tma_kernel");
  return true;
}

template <class Element, int Width>
void launch_backward_width(const ScatteredBackwardParams& p, const ScatteredDevice& device, cudaStream_t stream) {
  bool dq_launched = false;
  bool dkdv_launched = false;
  if constexpr (Width == kTmaTileColumns) {
    const int64_t slices = int64_t{p.heads_q} * p.batch;
    auto ctas = [&](int32_t rows, int per_cta, int64_t heads) { return (rows + per_cta - 1) / per_cta * heads; };
    constexpr int kTmaRows = ScatteredTmaTraits<Element, kTmaWarps>::kRows;
    dq_launched =
        device.hopper &&
        scattered_tma_fills_waves(ctas(p.seq_q, kTmaRows, slices),
                                  ctas(p.seq_q, ScatteredForwardTraits<Element, Width, kDqWarps<Width>>::kRows, slices),
                                  device.multiprocessors) &&
        launch_tma_form<Element>(p, p.batch, stream);
    const int64_t kv_slices = slices / p.heads_per_kv;
    dkdv_launched = device.hopper &&
                    scattered_tma_fills_waves(
                        ctas(p.seq_k, kTmaRows, kv_slices),
                        ctas(p.seq_k, ScatteredKeyTraits<Element, Width, kDkDvWarps<Width>>::kRows, kv_slices),
                        device.multiprocessors) &&
                    launch_dkdv_tma<Element>(p, stream);
  }
  if (!dq_launched) {
    using Traits = ScatteredForwardTraits<Element, Width, kDqWarps<Width>>;
    auto* kernel = scattered_rows_kernel<Element, Width, kDqWarps<Width>, ScatteredGradQRows<Element, Width>,
                                         ScatteredBackwardParams>;
    check_cuda(raise_dynamic_shared_memory_once(kernel, Traits::kSharedBytes), "scattered dQ shared memory");
    const dim3 grid((p.seq_q + Traits::kRows - 1) / Traits::kRows, p.heads_q, p.batch);
    if (grid.x != 0) {  // no query: no dQ row (dK and dV are still written, as zeros, below)
      kernel<<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(p);
      check_launch("scattered_rows_kernel (dQ)");
    }
  }
  if (dkdv_launched) return;
  if constexpr (kDkDvWarps<Width> != kDkDvNarrowWarps) {
    if (scattered_dkdv_warps(Width, device.max_shared_bytes) == kDkDvNarrowWarps) {
      launch_dkdv<Element, Width, kDkDvNarrowWarps>(p, stream);
      return;
    }
  }
  launch_dkdv<Element, Width, kDkDvWarps<Width>>(p, stream);
}

template <class Element>
void launch_forward_for(const ScatteredForwardParams& p, int32_t batch, int width, bool hopper, cudaStream_t stream) {
  switch (width) {
    case 32: launch_forward_width<Element, 32>(p, batch, hopper, stream); return;
    case 64: launch_forward_width<Element, 64>(p, batch, hopper, stream); return;
    default: launch_forward_width<Element, 128>(p, batch, hopper, stream); return;
  }
}

template <class Element>
void launch_backward_for(const ScatteredBackwardParams& p, int width, const ScatteredDevice& device,
                         cudaStream_t stream) {
  switch (width) {
    case 32: launch_backward_width<Element, 32>(p, device, stream); return;
    case 64: launch_backward_width<Element, 64>(p, device, stream); return;
    default: launch_backward_width<Element, 128>(p, device, stream); return;
  }
}

}  // namespace attnkit::cuda::sparse
