#include "cuda/common/kernel_attributes.hpp"

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace attnkit::cuda {
namespace {

struct KernelOnDevice {
  const void* kernel;
  int device;
  bool operator==(const KernelOnDevice&) const = default;
};

struct KernelOnDeviceHash {
  size_t operator()(const KernelOnDevice& k) const {
    return std::hash<const void*>()(k.kernel) ^ (static_cast<size_t>(k.device) * 0x9e3779b97f4a7c15ull);
  }
};

std::shared_mutex mutex;
std::unordered_map<KernelOnDevice, int, KernelOnDeviceHash> raised;  // the limit set, in bytes

}  // namespace

cudaError_t raise_dynamic_shared_memory_once(const void* kernel, int bytes) {
  int device = 0;
  if (const cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  const KernelOnDevice key{kernel, device};
  {
    std::shared_lock lock(mutex);
    const auto it = raised.find(key);
    if (it != raised.end() && it->second >= bytes) return cudaSuccess;
  }
  std::unique_lock lock(mutex);
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status == cudaSuccess) raised[key] = bytes;
  return status;
}

}  // namespace attnkit::cuda
