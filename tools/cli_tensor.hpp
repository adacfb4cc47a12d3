// Tensors of a CLI run. HostTensor holds contiguous row-major values of one dtype in host memory
// (random inputs, NaN-poisoned outputs, float64 copies for the reference); RunTensor pairs one
// with a buffer on the run's device and copies between the two.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/tensor.hpp"
#include "cli_device.hpp"

namespace attnkit::cli {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> extents);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& extents() const { return extents_; }
  int64_t numel() const;
  std::size_t bytes() const { return storage_.size(); }
  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }
  TensorView view();  // a CPU view of the values

  void fill_uniform(std::mt19937_64& rng, double lo = -1.0, double hi = 1.0);
  void fill_bernoulli(std::mt19937_64& rng, double probability_true);  // bool tensors
  void poison();                            // NaN in every element (false for bool), to see whether an op wrote it
  double at(int64_t i) const;               // element i (row-major) as a double
  HostTensor converted(DType dtype) const;  // exact for widening, e.g. to f64 for references

 private:
  DType dtype_ = DType::f32;
  std::vector<int64_t> extents_;
  std::vector<std::byte> storage_;
};

class RunTensor {
 public:
  RunTensor() = default;
  RunTensor(HostTensor host, Device device);  // allocates on device and uploads

  HostTensor& host() { return host_; }
  const HostTensor& host() const { return host_; }
  TensorView view() const;  // the device copy
  bool defined() const { return buffer_.data() != nullptr; }
  void upload() { buffer_.upload(host_.data()); }
  void download() { buffer_.download(host_.data()); }

 private:
  HostTensor host_;
  Device device_{};
  DeviceBuffer buffer_;
};

}  // namespace attnkit::cli
