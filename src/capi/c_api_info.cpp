// Library identity, error text and the contiguous-view helper of the C ABI.
#include <exception>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/build_info.hpp"
#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/version.hpp"
#include "capi/c_api_convert.hpp"
#include "capi/c_api_errors.hpp"

using namespace attnkit::capi;

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw attnkit::Error(attnkit::Status::invalid_argument, message);
}

// Row-major strides are products of the extents after each dimension (make_view computes them from the
// last dimension on): every such product must fit int64, even when an extent 0 makes the count 0.
void check_contiguous_extents(int32_t rank, const int64_t* extents) {
  for (int i = 0; i < rank; ++i) {
    if (extents[i] < 0) {
      invalid("extents[" + std::to_string(i) + "]: " + std::to_string(extents[i]) + "; allowed: extents >= 0");
    }
  }
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (__builtin_mul_overflow(stride, extents[i], &stride)) {
      invalid(
          "extents: the row-major strides overflow int64; allowed: every product of trailing extents <= "
          "9223372036854775807");
    }
  }
}

}  // namespace

extern "C" {

int32_t attnkit_abi_version(void) { return ATTNKIT_ABI_VERSION; }

const char* attnkit_version(void) { return ATTNKIT_VERSION_STRING; }

// Queries return a value, not a status: they leave attnkit_last_error() alone unless they fail.
int32_t attnkit_cuda_compiled(void) {
  try {
    return attnkit::build_info().cuda_compiled ? 1 : 0;
  } catch (const std::exception& error) {
    record_error(ATTNKIT_INTERNAL, error.what());
    return 0;
  }
}

int32_t attnkit_cuda_device_count(void) {
  try {
    return static_cast<int32_t>(attnkit::cuda_devices().size());
  } catch (const std::exception& error) {
    record_error(ATTNKIT_INTERNAL, error.what());
    return 0;
  }
}

const char* attnkit_last_error(void) { return last_error_text(); }

const char* attnkit_status_name(int32_t status) {
  switch (status) {
    case ATTNKIT_OK: return "ok";
    case ATTNKIT_INVALID_ARGUMENT: return "invalid_argument";
    case ATTNKIT_UNSUPPORTED: return "unsupported";
    case ATTNKIT_CUDA_ERROR: return "cuda_error";
    case ATTNKIT_OUT_OF_MEMORY: return "out_of_memory";
    case ATTNKIT_INTERNAL: return "internal";
    default: return "unknown";
  }
}

attnkit_status attnkit_tensor_contiguous(attnkit_tensor* view, void* data, int32_t dtype, int32_t device_type,
                                         int32_t device_index, int32_t rank, const int64_t* extents) {
  return guarded_call([&] {
    if (view == nullptr) {
      invalid("view: NULL; allowed: a pointer to the attnkit_tensor to fill");
    }
    attnkit_tensor fields{};
    fields.dtype = dtype;
    fields.device_type = device_type;
    fields.rank = rank;
    check_tensor_fields(fields, "view", AllowedDtypes::any);
    if (extents == nullptr && rank > 0) {
      invalid("extents: NULL with rank " + std::to_string(rank) + "; allowed: a pointer to rank extents");
    }
    check_contiguous_extents(rank, extents);
    const attnkit::Device device{static_cast<attnkit::DeviceType>(device_type), device_index};
    const attnkit::TensorView contiguous =
        attnkit::make_view(data, static_cast<attnkit::DType>(dtype), rank, extents, device);
    *view = to_c_tensor(contiguous);
  });
}

}  // extern "C"
