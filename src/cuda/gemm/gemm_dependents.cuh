// Programmatic dependent launch, the primary grid's side: a kernel whose partial sums the split-K sum adds
// (gemm_split_k.hpp, launched after it as a programmatic dependent on compute capability 9.0) signals once its CTA's
// sums are computed, so the sum's CTAs are scheduled during the kernel's tail; the sum still waits in
// griddepcontrol.wait until this grid has finished and its writes are visible. Nothing before compute capability 9.0,
// or for an ordinary launch of the sum.
#pragma once

namespace attnkit::cuda::gemm {

__device__ __forceinline__ void signal_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace attnkit::cuda::gemm
