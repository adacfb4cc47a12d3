#include "cli_tensor.hpp"

#include <limits>
#include <utility>

#include "core/float_convert.hpp"

namespace attnkit::cli {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> extents) : dtype_(dtype), extents_(std::move(extents)) {
  storage_.resize(static_cast<std::size_t>(numel()) * dtype_size(dtype_));
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t e : extents_) {
    n *= e;
  }
  return n;
}

TensorView HostTensor::view() {
  return make_view(storage_.data(), dtype_, static_cast<int32_t>(extents_.size()), extents_.data());
}

void HostTensor::fill_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    detail::store_from_double(storage_.data(), dtype_, i, dist(rng));
  }
}

void HostTensor::fill_bernoulli(std::mt19937_64& rng, double probability_true) {
  std::bernoulli_distribution dist(probability_true);
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    detail::store_from_double(storage_.data(), dtype_, i, dist(rng) ? 1 : 0);
  }
}

void HostTensor::poison() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    detail::store_from_double(storage_.data(), dtype_, i, dtype_ == DType::boolean ? 0.0 : nan);
  }
}

double HostTensor::at(int64_t i) const { return detail::load_as_double(storage_.data(), dtype_, i); }

HostTensor HostTensor::converted(DType dtype) const {
  HostTensor copy(dtype, extents_);
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    detail::store_from_double(copy.storage_.data(), dtype, i, at(i));
  }
  return copy;
}

RunTensor::RunTensor(HostTensor host, Device device)
    : host_(std::move(host)), device_(device), buffer_(device, host_.bytes()) {
  upload();
}

TensorView RunTensor::view() const {
  const auto& extents = host_.extents();
  return make_view(buffer_.data(), host_.dtype(), static_cast<int32_t>(extents.size()), extents.data(), device_);
}

}  // namespace attnkit::cli
