#include "cli_device.hpp"

#include <chrono>
#include <cstring>
#include <utility>

#include "attnkit/build_info.hpp"
#include "attnkit/error.hpp"
#include "cli_cuda_runtime.hpp"

namespace attnkit::cli {
namespace {

[[maybe_unused]] [[noreturn]] void no_cuda() {
  throw Error(Status::unsupported,
              "--backend cuda: this attnkit was built without CUDA; rebuild with -DATTNKIT_WITH_CUDA=ON or use "
              "--backend cpu");
}

bool on_cuda(const Device& device) { return device.type == DeviceType::cuda; }

}  // namespace

bool cuda_available() {
#ifdef ATTNKIT_WITH_CUDA
  return !cuda_devices().empty();
#else
  return false;
#endif
}

Device choose_device(Backend backend) {
  if (backend == Backend::cuda || (backend == Backend::automatic && cuda_available())) {
    return Device{DeviceType::cuda, 0};
  }
  return Device{DeviceType::cpu, 0};
}

DeviceBuffer::DeviceBuffer(Device device, std::size_t bytes) : device_(device), bytes_(bytes) {
  if (on_cuda(device)) {
#ifdef ATTNKIT_WITH_CUDA
    data_ = cuda_runtime::allocate(device.index, bytes);
#else
    no_cuda();
#endif
  } else {
    host_storage_.resize(bytes == 0 ? 1 : bytes);
    data_ = host_storage_.data();
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      host_storage_(std::move(other.host_storage_)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    host_storage_ = std::move(other.host_storage_);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
#ifdef ATTNKIT_WITH_CUDA
  if (on_cuda(device_)) cuda_runtime::release(device_.index, data_);
#endif
  data_ = nullptr;
  host_storage_.clear();
}

void DeviceBuffer::upload(const void* host) {
  if (bytes_ == 0) {
    return;
  }
  if (!on_cuda(device_)) {
    std::memcpy(data_, host, bytes_);
    return;
  }
#ifdef ATTNKIT_WITH_CUDA
  cuda_runtime::copy_to_device(device_.index, data_, host, bytes_);
#else
  no_cuda();
#endif
}

void DeviceBuffer::download(void* host) const {
  if (bytes_ == 0) {
    return;
  }
  if (!on_cuda(device_)) {
    std::memcpy(host, data_, bytes_);
    return;
  }
#ifdef ATTNKIT_WITH_CUDA
  cuda_runtime::copy_to_host(device_.index, host, data_, bytes_);
#else
  no_cuda();
#endif
}

void synchronize(Device device) {
  if (!on_cuda(device)) {
    return;
  }
#ifdef ATTNKIT_WITH_CUDA
  cuda_runtime::synchronize(device.index);
#else
  no_cuda();
#endif
}

double time_milliseconds(Device device, const std::function<void()>& work) {
  if (on_cuda(device)) {
#ifdef ATTNKIT_WITH_CUDA
    return cuda_runtime::time_milliseconds(device.index, work);
#else
    no_cuda();
#endif
  }
  const auto start = std::chrono::steady_clock::now();
  work();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(stop - start).count();
}

}  // namespace attnkit::cli
