#include "cuda/gemm/gemm_registry.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/generated/gemm_kernel_list.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_simt.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kMaxDevices = 64;

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, what, device), "cudaDeviceGetAttribute");
  return value;
}

GemmDevice read_device(int index) {
  GemmDevice device;
  device.index = index;
  device.capability =
      attribute(cudaDevAttrComputeCapabilityMajor, index) * 10 + attribute(cudaDevAttrComputeCapabilityMinor, index);
  device.multiprocessors = attribute(cudaDevAttrMultiProcessorCount, index);
  device.max_shared_bytes_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, index);
  return device;
}

std::string names_of_entries() {
  std::string names;
  for (const GemmKernel* kernel : gemm_kernels()) names += (names.empty() ? "" : ", ") + std::string(kernel->name);
  return names;
}

int64_t output_tiles(const GemmKernel& kernel, const GemmShape& shape) {
  const int64_t tile_m = std::max(kernel.tile_m, 1), tile_n = std::max(kernel.tile_n, 1);
  return (shape.m + tile_m - 1) / tile_m * ((shape.n + tile_n - 1) / tile_n) * shape.batch;
}

}  // namespace

#define ATTNKIT_GEMM_ENTRY(function, id) &function(),
const std::vector<const GemmKernel*>& gemm_kernels() {
  static const std::vector<const GemmKernel*> kernels = [] {
    std::vector<const GemmKernel*> list{ATTNKIT_GEMM_KERNELS(ATTNKIT_GEMM_ENTRY)};
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) list.push_back(&simt_gemm_kernel(dtype));
    return list;
  }();
  return kernels;
}
#undef ATTNKIT_GEMM_ENTRY

const GemmDevice& gemm_device(int index) {
  static std::array<GemmDevice, kMaxDevices> devices;
  static std::array<std::once_flag, kMaxDevices> once;
  if (index < 0 || index >= kMaxDevices) {
    throw Error(Status::invalid_argument, "device: index " + std::to_string(index) + "; allowed: 0 to 63");
  }
  const auto i = static_cast<size_t>(index);
  std::call_once(once[i], [&] { devices[i] = read_device(index); });
  return devices[i];
}

bool gemm_architecture_runs_on(int architecture, int capability) {
  if (architecture == 90) return capability == 90;
  return capability >= architecture;
}

bool gemm_kernel_matches(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32) {
  if (kernel.dtype != shape.dtype) return false;
  if (kernel.math == GemmMath::tf32 && !allow_tf32) return false;
  if (kernel.a_k_major >= 0 && (kernel.a_k_major == 1) != shape.a_k_major()) return false;
  if (kernel.b_k_major >= 0 && (kernel.b_k_major == 1) != shape.b_k_major()) return false;
  return true;
}

std::string GemmChoice::name() const { return std::string(kernel->name) + (staging.any() ? "+staged" : ""); }

std::string gemm_kernel_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                GemmStaging* staging) {
  *staging = GemmStaging{};
  std::string why = kernel.refusal(shape, device);
  if (why.empty() || kernel.tier == GemmTier::simt) return why;
  // Staged: TMA rows copy the operands whose strides miss its rule, SM80 rows also pad the extents.
  const GemmStaging staged = kernel.tier == GemmTier::sm90 ? tma_staging(shape) : padded_staging(shape);
  if (!staged.any() || !kernel.refusal(staged_shape(shape, staged), device).empty()) return why;
  *staging = staged;
  return "";
}

GemmChoice select_gemm_kernel(const GemmShape& shape, const GemmDevice& device, bool allow_tf32) {
  if (const char* forced = std::getenv(kForcedGemmConfigVariable); forced != nullptr && forced[0] != '\0') {
    for (const GemmKernel* kernel : gemm_kernels()) {
      if (std::string(kernel->name) != forced) continue;
      std::string why;
      GemmStaging staging;
      if (kernel->dtype != shape.dtype) {
        why = "its dtype is " + std::string(dtype_name(kernel->dtype)) + ", the call's " +
              std::string(dtype_name(shape.dtype));
      } else if (!gemm_architecture_runs_on(kernel->architecture, device.capability)) {
        why = "it is built for sm_" + std::to_string(kernel->architecture) + ", the device is compute capability " +
              std::to_string(device.capability);
      } else if (!shape.product_zero && !gemm_kernel_matches(*kernel, shape, true)) {
        why = "its A / B majorness differ from the call's";
      } else if (!shape.product_zero) {
        why = gemm_kernel_refusal(*kernel, shape, device, &staging);
      }
      if (!why.empty()) {
        throw Error(Status::unsupported, std::string(kForcedGemmConfigVariable) + "=" + forced +
                                             ": that kernel cannot run this problem (" + why +
                                             "); allowed: unset it, or name a kernel that fits");
      }
      if (shape.product_zero) return {&simt_gemm_kernel(shape.dtype), {}};
      return {kernel, staging};
    }
    throw Error(Status::unsupported, std::string(kForcedGemmConfigVariable) + "=" + forced +
                                         ": no such kernel in this build; allowed: " + names_of_entries());
  }
  if (shape.product_zero) return {&simt_gemm_kernel(shape.dtype), {}};
  GemmChoice data_parallel, stream_k, split_k;
  for (const GemmKernel* kernel : gemm_kernels()) {
    if (kernel->tier == GemmTier::simt || !gemm_kernel_matches(*kernel, shape, allow_tf32)) continue;
    if (!gemm_architecture_runs_on(kernel->architecture, device.capability)) continue;
    GemmChoice& slot = kernel->split_k ? split_k : kernel->stream_k ? stream_k : data_parallel;
    GemmStaging staging;
    if (slot.kernel == nullptr && gemm_kernel_refusal(*kernel, shape, device, &staging).empty()) {
      slot = {kernel, staging};
    }
  }
  // Fewer output tiles than half the SMs leave most of the device idle: split K instead. Split-K slices when
  // its rule holds (its refusal: at least three slices a tile, so CUTLASS's stream-K would chain as many
  // in-place reductions a tile), else stream-K.
  const bool small_grid =
      data_parallel.kernel != nullptr && 2 * output_tiles(*data_parallel.kernel, shape) < device.multiprocessors;
  if (small_grid && split_k.kernel != nullptr) return split_k;
  if (small_grid && stream_k.kernel != nullptr) return stream_k;
  if (data_parallel.kernel != nullptr) return data_parallel;
  if (stream_k.kernel != nullptr) return stream_k;
  return {&simt_gemm_kernel(shape.dtype), {}};
}

}  // namespace attnkit::cuda::gemm
