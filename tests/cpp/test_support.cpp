#include "test_support.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/float_convert.hpp"

namespace attnkit::test {
namespace {

int64_t offset_of(const TensorView& view, const std::vector<int64_t>& index) {
  if (static_cast<int32_t>(index.size()) != view.rank) throw std::invalid_argument("index rank does not match view");
  int64_t offset = 0;
  for (int32_t d = 0; d < view.rank; ++d) offset += index[d] * view.strides[d];
  return offset;
}

}  // namespace

HostTensor HostTensor::contiguous(DType dtype, const std::vector<int64_t>& extents) {
  return strided(dtype, extents, std::vector<int64_t>(extents.size(), 0));
}

HostTensor HostTensor::strided(DType dtype, const std::vector<int64_t>& extents, const std::vector<int64_t>& padding) {
  if (extents.size() != padding.size() || extents.size() > static_cast<size_t>(kMaxRank)) {
    throw std::invalid_argument("HostTensor::strided: extents and padding must have the same rank <= kMaxRank");
  }
  HostTensor tensor;
  const auto rank = static_cast<int32_t>(extents.size());
  int64_t stride = 1;
  int64_t start = 0;
  for (int32_t d = rank - 1; d >= 0; --d) {
    tensor.view.extents[d] = extents[d];
    tensor.view.strides[d] = stride;
    if (padding[d] > 0) start += stride;
    stride *= extents[d] + padding[d];
  }
  tensor.storage.resize(static_cast<size_t>(stride) * dtype_size(dtype));
  tensor.view.data = tensor.storage.data() + static_cast<size_t>(start) * dtype_size(dtype);
  tensor.view.dtype = dtype;
  tensor.view.rank = rank;
  return tensor;
}

HostTensor HostTensor::padded(DType dtype, const std::vector<int64_t>& extents, int64_t pad) {
  return strided(dtype, extents, std::vector<int64_t>(extents.size(), pad));
}

void for_each_offset(const TensorView& view, const std::function<void(int64_t)>& f) {
  for (int32_t d = 0; d < view.rank; ++d) {
    if (view.extents[d] == 0) return;
  }
  std::vector<int64_t> index(static_cast<size_t>(view.rank), 0);
  while (true) {
    f(offset_of(view, index));
    int32_t d = view.rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < view.extents[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

std::vector<double> to_doubles(const TensorView& view) {
  std::vector<double> values;
  values.reserve(static_cast<size_t>(view.numel()));
  for_each_offset(view,
                  [&](int64_t offset) { values.push_back(detail::load_as_double(view.data, view.dtype, offset)); });
  return values;
}

double element_at(const TensorView& view, const std::vector<int64_t>& index) {
  return detail::load_as_double(view.data, view.dtype, offset_of(view, index));
}

void set_element(const TensorView& view, const std::vector<int64_t>& index, double value) {
  detail::store_from_double(view.data, view.dtype, offset_of(view, index), value);
}

void fill_random(const TensorView& view, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> uniform(lo, hi);
  for_each_offset(view,
                  [&](int64_t offset) { detail::store_from_double(view.data, view.dtype, offset, uniform(rng)); });
}

void fill_random_bool(const TensorView& view, std::mt19937_64& rng, double probability_true) {
  std::bernoulli_distribution coin(probability_true);
  for_each_offset(view, [&](int64_t offset) { detail::store_from_double(view.data, view.dtype, offset, coin(rng)); });
}

void fill_value(const TensorView& view, double value) {
  for_each_offset(view, [&](int64_t offset) { detail::store_from_double(view.data, view.dtype, offset, value); });
}

void poison_nan(const TensorView& view) { fill_value(view, std::numeric_limits<double>::quiet_NaN()); }

HostTensor poisoned_tensor(DType dtype, const std::vector<int64_t>& extents) {
  HostTensor t = HostTensor::contiguous(dtype, extents);
  poison_nan(t.view);
  return t;
}

double relative_l2(const TensorView& a, const TensorView& ref) {
  if (a.rank != ref.rank) throw std::invalid_argument("relative_l2: ranks differ");
  for (int32_t d = 0; d < a.rank; ++d) {
    if (a.extents[d] != ref.extents[d]) throw std::invalid_argument("relative_l2: extents differ");
  }
  const std::vector<double> values = to_doubles(a);
  const std::vector<double> reference = to_doubles(ref);
  double error = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != reference[i]) {
      const double diff = values[i] - reference[i];
      error += diff * diff;
    }
    if (std::isfinite(reference[i])) norm += reference[i] * reference[i];
  }
  if (norm == 0.0) return error == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(error / norm);
}

double max_abs_difference(const TensorView& a, const TensorView& ref) {
  const std::vector<double> values = to_doubles(a);
  const std::vector<double> reference = to_doubles(ref);
  if (values.size() != reference.size()) throw std::invalid_argument("max_abs_difference: sizes differ");
  double worst = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == reference[i]) continue;
    const double diff = std::abs(values[i] - reference[i]);
    if (!(diff <= worst)) worst = diff;  // NaN propagates
  }
  return worst;
}

bool all_finite(const TensorView& view) {
  bool finite = true;
  for_each_offset(view, [&](int64_t offset) {
    finite = finite && std::isfinite(detail::load_as_double(view.data, view.dtype, offset));
  });
  return finite;
}

bool any_nan(const TensorView& view) {
  bool nan = false;
  for_each_offset(
      view, [&](int64_t offset) { nan = nan || std::isnan(detail::load_as_double(view.data, view.dtype, offset)); });
  return nan;
}

}  // namespace attnkit::test
