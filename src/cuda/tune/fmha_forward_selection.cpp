#include "cuda/tune/fmha_forward_selection.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

#include "attnkit/error.hpp"
#include "core/log.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/tune/cuda_config_choice.hpp"
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_config_space.hpp"

namespace attnkit::cuda::fmha {
namespace {

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, what, device), "cudaDeviceGetAttribute");
  return value;
}

struct ForwardDirection {
  static constexpr tune::TuneOp op = tune::TuneOp::attention_forward;
  static constexpr const char* forced_variable = kForcedForwardConfigVariable;
  static constexpr const char* name = "forward";
  static const FmhaKernel* registry_default(DType dtype, const detail::AttentionShape& shape, MaskKind mask,
                                            const FmhaDevice& device) {
    return fmha_default_kernel(dtype, shape.head_dim, shape.head_dim_v, fmha_policy_for(mask), device);
  }
  static std::string config_name(const FmhaKernel& kernel) { return fmha_config_name(kernel.config); }
  static const FmhaKernel* entry_of(const tune::Config& config) { return forward_kernel_of(config); }
  static bool fits(const FmhaKernel& kernel, const FmhaDevice& device) {
    return fmha_config_fits(kernel.config, device);
  }
};

}  // namespace

bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures globally
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

namespace {

constexpr int kMaxDevices = 64;

// A value per device, computed on first use under a lock (device queries can cost milliseconds).
template <class Value, class Compute>
Value once_per_device(std::array<std::optional<Value>, kMaxDevices>& values, std::mutex& mutex, int device,
                      Compute&& compute) {
  if (device < 0 || device >= kMaxDevices) return compute();
  std::lock_guard lock(mutex);
  auto& slot = values[static_cast<size_t>(device)];
  if (!slot) slot = compute();
  return *slot;
}

tune::DeviceDescription query_cuda_device(int device) {
  cudaDeviceProp props{};
  check_cuda(cudaGetDeviceProperties(&props, device), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.index = device;
  info.name = props.name;
  info.compute_capability = props.major * 10 + props.minor;
  info.multiprocessors = props.multiProcessorCount;
  info.memory_bytes = static_cast<long long>(props.totalGlobalMem);
  const tune::ConfigSpaceRegistry& registry = tune::builtin_config_spaces();
  tune::DeviceLimits limits = tune::cuda_device_limits(info.compute_capability, info.multiprocessors);
  // The published table scales the roofline; the hard filters use what this device reports.
  limits.max_smem_per_block = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  limits.max_smem_per_processor = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  limits.max_threads_per_block = attribute(cudaDevAttrMaxThreadsPerBlock, device);
  limits.max_threads_per_processor = attribute(cudaDevAttrMaxThreadsPerMultiProcessor, device);
  limits.registers_per_processor = attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  limits.max_blocks_per_processor = attribute(cudaDevAttrMaxBlocksPerMultiprocessor, device);
  return {tune::cuda_device_key(info, registry), limits};
}

}  // namespace

tune::DeviceDescription describe_cuda_device(int device) {
  static std::array<std::optional<tune::DeviceDescription>, kMaxDevices> described;
  static std::mutex mutex;
  return once_per_device(described, mutex, device, [device] { return query_cuda_device(device); });
}

FmhaDevice fmha_device(int device) {
  static std::array<std::optional<FmhaDevice>, kMaxDevices> devices;
  static std::mutex mutex;
  return once_per_device(devices, mutex, device, [device] {
    return FmhaDevice{attribute(cudaDevAttrComputeCapabilityMajor, device) * 10 +
                          attribute(cudaDevAttrComputeCapabilityMinor, device),
                      attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                      attribute(cudaDevAttrMultiProcessorCount, device)};
  });
}

FmhaDevice require_sm80_device(int device) {
  const FmhaDevice found = fmha_device(device);
  const int capability = found.capability;
  if (capability < 80) {
    throw Error(Status::unsupported, "q.device: cuda:" + std::to_string(device) + " has compute capability " +
                                         std::to_string(capability / 10) + "." + std::to_string(capability % 10) +
                                         "; allowed: 8.0 or newer (the CUDA attention kernels use SM80 tensor cores "
                                         "and cp.async), or run on CPU tensors");
  }
  return found;
}

AttentionConfigChoice choose_attention_config(tune::TuneOp op, DType dtype, const detail::AttentionShape& shape,
                                              const AttentionMask& mask, const RunOptions& options, int device) {
  const tune::ProblemSpec exact = tune::attention_problem_spec(op, dtype, shape, mask, 1.0);
  // A sparse mask is the call's own (the synchronisation before the runner is built makes it ready to read
  // on the runner's stream).
  return choose_cuda_config(exact, options, device, [&exact, &mask, device]() -> std::unique_ptr<tune::Runner> {
    return std::make_unique<FmhaAttentionRunner>(exact, device, device_l2_bytes(device), 1, &mask);
  });
}

ForwardSelection select_forward_kernel(const AttentionForward& problem, const detail::AttentionShape& shape,
                                       const RunOptions& options, int device, const FmhaDevice& limits) {
  return select_registry_kernel<ForwardDirection, FmhaKernel>(problem.q.dtype, shape, problem.mask.kind, limits, [&] {
    return choose_attention_config(ForwardDirection::op, problem.q.dtype, shape, problem.mask, options, device);
  });
}

ForwardSelection forward_selection(const AttentionForward& problem, const detail::AttentionShape& shape,
                                   const RunOptions& options) {
  check_forward_supported(problem, shape);
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  FmhaDevice limits = require_sm80_device(device);
  limits.portable_only = problem.mask.rpb.defined();
  ForwardSelection selection = select_forward_kernel(problem, shape, options, device, limits);
  if (selection.kernel == nullptr) {
    const FmhaPolicyKind policy = fmha_policy_for(problem.mask.kind);
    throw Error(Status::unsupported,
                "head_dim: no compiled " + std::string(fmha_policy_name(policy)) + " kernel for " +
                    std::string(dtype_name(problem.q.dtype)) +
                    " with max(D, Dv) = " + std::to_string(std::max(shape.head_dim, shape.head_dim_v)) +
                    " fits cuda:" + std::to_string(device) + " (" + std::to_string(limits.max_shared_bytes_optin) +
                    " bytes of shared memory per block); compiled: " + fmha_compiled_summary());
  }
  return selection;
}

}  // namespace attnkit::cuda::fmha
