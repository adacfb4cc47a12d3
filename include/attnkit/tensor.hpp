// A non-owning view of a strided tensor on some device. Strides are in elements.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include "attnkit/export.hpp"

#include "attnkit/dtype.hpp"

namespace attnkit {

// Values match the C ABI's attnkit_device_type.
enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int32_t index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

constexpr int kMaxRank = 8;

struct ATTNKIT_API TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> extents{};
  std::array<int64_t, kMaxRank> strides{};

  // An absent optional tensor (LSE not wanted, no initial state, ...) is a view with no data.
  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_string() const;  // "[2, 64, 4, 32]"
};

// A view with row-major (contiguous) strides.
ATTNKIT_API TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> extents, Device device = {});
ATTNKIT_API TensorView make_view(void* data, DType dtype, int32_t rank, const int64_t* extents, Device device = {});

}  // namespace attnkit
