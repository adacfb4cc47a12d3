// The few CUDA runtime calls the CLI needs for device buffers and event timing. Declared and
// defined only when the build has CUDA (ATTNKIT_WITH_CUDA), so a CPU-only build never sees CUDA.
#pragma once
#ifdef ATTNKIT_WITH_CUDA
#include <cstddef>
#include <functional>

namespace attnkit::cli::cuda_runtime {

void* allocate(int device, std::size_t bytes);
void release(int device, void* pointer) noexcept;
void copy_to_device(int device, void* destination, const void* source, std::size_t bytes);
void copy_to_host(int device, void* destination, const void* source, std::size_t bytes);
void synchronize(int device);
double time_milliseconds(int device, const std::function<void()>& work);

}  // namespace attnkit::cli::cuda_runtime
#endif
