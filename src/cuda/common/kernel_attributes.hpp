// Kernel attributes set once per (kernel, device) instead of on every launch: the opt-in dynamic shared
// memory limit of a kernel is a property of the kernel in the device's context, so the first launch on
// a device sets it and later launches only look it up (a shared lock and a hash look-up, against a
// driver call per launch before).
#pragma once
#include <cuda_runtime_api.h>

namespace attnkit::cuda {

// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) on the current
// device, unless it was already done there with at least `bytes`.
cudaError_t raise_dynamic_shared_memory_once(const void* kernel, int bytes);

template <class Kernel>
cudaError_t raise_dynamic_shared_memory_once(Kernel* kernel, int bytes) {
  return raise_dynamic_shared_memory_once(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace attnkit::cuda
