#include "core/validate_checks.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "attnkit/error.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail::checks {

void fail(const std::string& message) { throw Error(Status::invalid_argument, message); }

std::string device_string(const Device& device) {
  const char* type = device.type == DeviceType::cpu ? "cpu" : device.type == DeviceType::cuda ? "cuda" : nullptr;
  if (type == nullptr) {
    return "unknown type " + std::to_string(static_cast<int32_t>(device.type));
  }
  return std::string(type) + ":" + std::to_string(device.index);
}

std::string dtype_string(DType dtype) {
  const auto code = static_cast<int32_t>(dtype);
  if (code < 0 || code > static_cast<int32_t>(DType::boolean)) {
    return "unknown (" + std::to_string(code) + ")";
  }
  return std::string(dtype_name(dtype));
}

std::string extents_string(std::span<const int64_t> extents) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < extents.size(); ++i) {
    out << (i ? ", " : "") << extents[i];
  }
  out << ']';
  return out.str();
}

std::string strides_string(const TensorView& view) {
  return extents_string(std::span<const int64_t>(view.strides.data(), static_cast<std::size_t>(view.rank)));
}

std::string number_string(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

namespace {

std::string shape_of(const TensorView& view) { return view.shape_string(); }

std::string named(std::string_view name) { return std::string(name); }

}  // namespace

void check_present(const TensorView& view, std::string_view name) {
  if (!is_given(view)) {
    fail(named(name) +
         ": data pointer is null (tensor not given); allowed: a tensor with data (null only for a "
         "tensor with an extent 0, which has no elements), " +
         named(name) + " is required");
  }
}

void check_device_valid(const TensorView& view, std::string_view name) {
  const auto type = static_cast<int32_t>(view.device.type);
  if (type != static_cast<int32_t>(DeviceType::cpu) && type != static_cast<int32_t>(DeviceType::cuda)) {
    fail(named(name) + ".device.type: " + std::to_string(type) + "; allowed: 0 (cpu) or 1 (cuda)");
  }
  if (view.device.index < 0) {
    fail(named(name) + ".device.index: " + std::to_string(view.device.index) + "; allowed: an index >= 0");
  }
}

void check_rank_in(const TensorView& view, std::string_view name, int32_t min_rank, int32_t max_rank,
                   std::string_view layout) {
  if (view.rank < min_rank || view.rank > max_rank) {
    const std::string shape = (view.rank >= 0 && view.rank <= kMaxRank) ? " (shape " + shape_of(view) + ")" : "";
    const std::string allowed = min_rank == max_rank
                                    ? "rank " + std::to_string(min_rank)
                                    : "rank " + std::to_string(min_rank) + " to " + std::to_string(max_rank);
    fail(named(name) + ": rank " + std::to_string(view.rank) + shape + "; allowed: " + allowed + ", layout " +
         named(layout));
  }
}

void check_extents_nonnegative(const TensorView& view, std::string_view name) {
  for (int i = 0; i < view.rank; ++i) {
    if (view.extents[i] < 0) {
      fail(named(name) + ": extent " + std::to_string(view.extents[i]) + " in dim " + std::to_string(i) + " (shape " +
           shape_of(view) + "); allowed: every extent >= 0 (0: a tensor with no elements)");
    }
  }
}

void check_strides_nonnegative(const TensorView& view, std::string_view name) {
  for (int i = 0; i < view.rank; ++i) {
    if (view.strides[i] < 0) {
      fail(named(name) + ": stride " + std::to_string(view.strides[i]) + " in dim " + std::to_string(i) + " (strides " +
           strides_string(view) + "); allowed: strides >= 0");
    }
  }
}

void check_last_dim_contiguous(const TensorView& view, std::string_view name) {
  if (view.rank < 1 || has_no_elements(view)) {
    return;  // no element is read or written, so the layout does not matter
  }
  const int64_t stride = view.strides[view.rank - 1];
  if (stride != 1) {
    fail(named(name) + ": stride " + std::to_string(stride) + " in the last dim (strides " + strides_string(view) +
         "); allowed: 1, the last dimension must be contiguous (other strides are free)");
  }
}

void check_offsets_fit_int64(const TensorView& view, std::string_view name) {
  int64_t count = 1;
  int64_t offset = 0;
  bool overflow = false;
  for (int i = 0; i < view.rank && !overflow; ++i) {
    int64_t term = 0;
    overflow = __builtin_mul_overflow(count, view.extents[i], &count) ||
               __builtin_mul_overflow(view.extents[i] - 1, view.strides[i], &term) ||
               __builtin_add_overflow(offset, term, &offset);
  }
  const auto element_size = static_cast<int64_t>(dtype_size(view.dtype));
  int64_t bytes = 0;
  if (!overflow) {
    overflow =
        __builtin_mul_overflow(offset, element_size, &bytes) || __builtin_add_overflow(bytes, element_size, &bytes);
  }
  if (overflow) {
    fail(named(name) + ": shape " + shape_of(view) + " with strides " + strides_string(view) +
         " reaches an element count or offset beyond int64; allowed: the element count, and the largest "
         "offset (sum of (extent-1)*stride) times the element size, must fit in int64 (<= " +
         std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  }
}

void check_aligned(const TensorView& view, std::string_view name) {
  const auto element_size = static_cast<std::uintptr_t>(dtype_size(view.dtype));
  const auto address = reinterpret_cast<std::uintptr_t>(view.data);
  if (element_size > 1 && address % element_size != 0) {
    std::ostringstream hex;
    hex << std::hex << "0x" << address;
    fail(named(name) + ": data pointer " + hex.str() + " is not aligned to its " + dtype_string(view.dtype) +
         " elements; allowed: an address that is a multiple of " + std::to_string(element_size) + " bytes");
  }
}

void check_output_not_broadcast(const TensorView& view, std::string_view name) {
  if (has_no_elements(view)) return;  // nothing is written, so nothing is written twice
  for (int i = 0; i < view.rank; ++i) {
    if (view.strides[i] == 0 && view.extents[i] > 1) {
      fail(named(name) + ": stride 0 in dim " + std::to_string(i) + " of extent " + std::to_string(view.extents[i]) +
           " (strides " + strides_string(view) +
           "); allowed: an output may not broadcast, every dim of extent > 1 needs a stride >= 1");
    }
  }
}

void check_view_structure(const TensorView& view, std::string_view name, int32_t min_rank, int32_t max_rank,
                          std::string_view layout) {
  check_device_valid(view, name);
  check_rank_in(view, name, min_rank, max_rank, layout);
  check_extents_nonnegative(view, name);
  check_strides_nonnegative(view, name);
  check_offsets_fit_int64(view, name);
}

void check_floating_dtype(const TensorView& view, std::string_view name) {
  switch (view.dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::f64: return;
    case DType::boolean: break;
  }
  fail(named(name) + ": dtype " + dtype_string(view.dtype) + "; allowed: float32, float16, bfloat16, float64");
}

void check_dtype_is(const TensorView& view, std::string_view name, DType expected, std::string_view why) {
  if (view.dtype != expected) {
    fail(named(name) + ": dtype " + dtype_string(view.dtype) + "; allowed: " + dtype_string(expected) + " (" +
         named(why) + ")");
  }
}

void check_same_dtype(const TensorView& view, std::string_view name, const TensorView& reference,
                      std::string_view reference_name) {
  if (view.dtype != reference.dtype) {
    fail(named(name) + ": dtype " + dtype_string(view.dtype) + " differs from " + named(reference_name) + "'s " +
         dtype_string(reference.dtype) + "; allowed: " + dtype_string(reference.dtype) + ", one dtype for " +
         named(reference_name) + " and " + named(name));
  }
}

void check_same_device(const TensorView& view, std::string_view name, const TensorView& reference,
                       std::string_view reference_name) {
  if (!(view.device == reference.device)) {
    fail(named(name) + ": device " + device_string(view.device) + " differs from " + named(reference_name) +
         "'s device " + device_string(reference.device) + "; allowed: " + device_string(reference.device) +
         ", all tensors of a call on one device");
  }
}

void check_shape_equals(const TensorView& view, std::string_view name, std::span<const int64_t> expected,
                        std::string_view layout) {
  bool equal = view.rank == static_cast<int32_t>(expected.size());
  for (int i = 0; equal && i < view.rank; ++i) {
    equal = view.extents[i] == expected[i];
  }
  if (!equal) {
    fail(named(name) + ": shape " + shape_of(view) + "; allowed: " + extents_string(expected) + " = " + named(layout));
  }
}

void check_finite(double value, std::string_view name) {
  if (!std::isfinite(value)) {
    fail(named(name) + ": " + number_string(value) + "; allowed: a finite value");
  }
}

void check_scale(const std::optional<double>& scale, std::string_view default_text) {
  if (scale && !(std::isfinite(*scale) && *scale > 0.0)) {
    fail("scale: " + number_string(*scale) + "; allowed: a finite value > 0, or no scale for the default " +
         named(default_text));
  }
}

void check_run_options(const RunOptions& options) {
  const auto backend = static_cast<int32_t>(options.backend);
  if (backend < static_cast<int32_t>(Backend::automatic) || backend > static_cast<int32_t>(Backend::cuda)) {
    fail("options.backend: " + std::to_string(backend) + "; allowed: 0 (auto), 1 (cpu), 2 (cuda)");
  }
  if (options.num_threads < 0) {
    fail("options.num_threads: " + std::to_string(options.num_threads) +
         "; allowed: 0 (all available threads) or a positive count");
  }
}

}  // namespace attnkit::detail::checks
