// Where the CLI's tensors live and how it times work there. CPU tensors are plain host memory and
// are timed with a steady clock; CUDA tensors live in device memory and are timed with CUDA events
// on the default stream (the stream the CLI passes to the library). In a build without CUDA every
// CUDA request fails with a message saying how to get CUDA.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cli {

bool cuda_available();  // compiled with CUDA and at least one device visible
// The device a run's tensors go to: CUDA for --backend cuda, or for auto when a GPU is available.
Device choose_device(Backend backend);

// Move-only owner of `bytes` bytes on a device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host);    // copies bytes() bytes from host memory
  void download(void* host) const;  // copies bytes() bytes to host memory

 private:
  void release() noexcept;
  Device device_{};
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<std::byte> host_storage_;  // backing store of CPU buffers
};

void synchronize(Device device);
// Wall time of `work` on `device` in milliseconds (work launched and finished).
double time_milliseconds(Device device, const std::function<void()>& work);

}  // namespace attnkit::cli
