// Shared helpers for tests that run ops on host memory: an owning host tensor (contiguous, or a
// strided view into a larger padded buffer), random fill, NaN poisoning, relative L2 error in
// double, and finiteness checks. Works for every DType through each view's own dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "attnkit/tensor.hpp"

namespace attnkit::test {

// Owns its bytes; `view` points into them. Move-only, so the view never dangles.
struct HostTensor {
  std::vector<std::byte> storage;
  TensorView view;

  HostTensor() = default;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  // Row-major, densely packed.
  static HostTensor contiguous(DType dtype, const std::vector<int64_t>& extents);
  // A view of `extents` inside a buffer that is padding[d] larger in each dimension and starting
  // one element in along every padded dimension, so strides differ from the packed ones. The last
  // dimension stays contiguous (stride 1); padding it widens the row stride.
  static HostTensor strided(DType dtype, const std::vector<int64_t>& extents, const std::vector<int64_t>& padding);
  // strided() with `pad` extra elements in every dimension.
  static HostTensor padded(DType dtype, const std::vector<int64_t>& extents, int64_t pad = 2);
};

// Calls f(element offset) for every element of the view, in row-major index order.
void for_each_offset(const TensorView& view, const std::function<void(int64_t)>& f);

// Element values in row-major index order, as doubles.
std::vector<double> to_doubles(const TensorView& view);
double element_at(const TensorView& view, const std::vector<int64_t>& index);
void set_element(const TensorView& view, const std::vector<int64_t>& index, double value);

// Uniform in [lo, hi), rounded to the view's dtype.
void fill_random(const TensorView& view, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0);
// Bool views: true with the given probability.
void fill_random_bool(const TensorView& view, std::mt19937_64& rng, double probability_true);
void fill_value(const TensorView& view, double value);
// Every element NaN, so a test can tell whether an op wrote it.
void poison_nan(const TensorView& view);
// A contiguous tensor of NaN (an output whose unwritten elements then show).
HostTensor poisoned_tensor(DType dtype, const std::vector<int64_t>& extents);

// ||a - ref|| / ||ref|| over all elements, in double. Equal values (including equal infinities,
// e.g. LSE = -inf of fully masked rows) count as no error; non-finite reference values are left
// out of ||ref||. Any NaN in `a` makes the result NaN. Extents must match.
double relative_l2(const TensorView& a, const TensorView& ref);
double max_abs_difference(const TensorView& a, const TensorView& ref);
bool all_finite(const TensorView& view);
bool any_nan(const TensorView& view);

}  // namespace attnkit::test
