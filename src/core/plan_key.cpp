#include "core/plan_key.hpp"

#include <bit>

#include "attnkit/error.hpp"
#include "core/zero_size.hpp"

namespace attnkit::detail {

void PlanKey::add(int64_t word) {
  if (size_ == kMaxWords) throw Error(Status::internal, "plan key: more than 256 words");
  words_[static_cast<size_t>(size_++)] = word;
  // A multiply-xorshift mix per word: cheap, and every bit of the word reaches the hash.
  hash_ = (hash_ ^ static_cast<uint64_t>(word)) * 0xff51afd7ed558ccdull;
  hash_ ^= hash_ >> 29;
}

void PlanKey::add(double value) { add(std::bit_cast<int64_t>(value)); }

void PlanKey::add(const std::optional<double>& value) {
  add(int64_t{value.has_value()});
  add(value.value_or(0.0));
}

void PlanKey::add(const TensorView& view) {
  // A tensor with no elements may have a null pointer and is still given: its shape is part of the key.
  if (!is_given(view)) {
    add(int64_t{0});
    return;
  }
  // present | dtype | device type | rank | alignment, then the device index, extents and strides.
  add(int64_t{1} | static_cast<int64_t>(view.dtype) << 8 | static_cast<int64_t>(view.device.type) << 16 |
      static_cast<int64_t>(view.rank & 0xff) << 24 | address_alignment_bits(view.data) << 32);
  add(static_cast<int64_t>(view.device.index));
  const int rank = view.rank < 0 ? 0 : (view.rank > kMaxRank ? kMaxRank : view.rank);
  for (int i = 0; i < rank; ++i) add(view.extents[static_cast<size_t>(i)]);
  for (int i = 0; i < rank; ++i) add(view.strides[static_cast<size_t>(i)]);
}

void PlanKey::add(const RunOptions& options) {
  add(static_cast<int64_t>(options.backend));
  add(static_cast<int64_t>(options.num_threads));
  add(int64_t{options.no_tuning});
}

}  // namespace attnkit::detail
