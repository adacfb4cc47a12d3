// Programmatic dependent launch (compute capability 9.0): a grid launched with `programmatic` set may be scheduled
// while the grid before it on the stream still runs, as soon as every CTA of that grid has called
// signal_dependents (or finished); it must not read what that grid writes before wait_for_preceding_grid, which
// returns once that grid has finished and its writes are visible. Both are no-ops before 9.0 and, for the waiting
// side, after an ordinary launch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace attnkit::cuda {

__device__ __forceinline__ void signal_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_preceding_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Launches `kernel` (cudaLaunchKernelEx), as a programmatic dependent of the stream's previous grid when
// `programmatic`. The caller checks the returned status.
template <class... Parameters, class... Arguments>
cudaError_t launch_kernel(void (*kernel)(Parameters...), dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, bool programmatic, Arguments&&... arguments) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Arguments>(arguments)...);
}

}  // namespace attnkit::cuda
