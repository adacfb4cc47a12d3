#include <string>

#include "attnkit/backend.hpp"
#include "attnkit/error.hpp"
#include "core/validate.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::automatic: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
  }
  return "unknown";
}

namespace detail {

Backend resolve_backend(Backend requested, const Device& device) {
  const Backend chosen =
      requested != Backend::automatic ? requested : (device.type == DeviceType::cuda ? Backend::cuda : Backend::cpu);
  const bool device_is_cuda = device.type == DeviceType::cuda;
  if ((chosen == Backend::cuda) != device_is_cuda) {
    throw Error(Status::invalid_argument, std::string("backend: '") + backend_name(chosen) +
                                              "' cannot run tensors on device '" + (device_is_cuda ? "cuda" : "cpu") +
                                              "'; allowed: backend 'cpu' for CPU tensors, 'cuda' for "
                                              "CUDA tensors, or 'auto'");
  }
  if (chosen == Backend::cuda && !cuda::compiled()) {
    throw Error(Status::unsupported,
                "backend: 'cuda' was requested but this libattnkit was built without CUDA; rebuild with "
                "-DATTNKIT_WITH_CUDA=ON (needs nvcc >= 12.4) or use backend 'cpu'");
  }
  return chosen;
}

}  // namespace detail
}  // namespace attnkit
