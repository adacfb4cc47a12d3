// The fuzzer's only source of choices: every decision the generator makes reads bytes from the input, so an
// input file replays exactly, libFuzzer's mutations steer the generator, and any byte string (even an empty
// one) is a valid input. Past the end every read returns 0, which picks the first (most ordinary) choice.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace attnkit::fuzz {

class ByteSource {
 public:
  ByteSource(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }

  uint32_t u32() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) value = value << 8 | byte();
    return value;
  }

  // Uniform-ish in [lo, hi] (inclusive); lo when the bytes are exhausted.
  int64_t range(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const auto span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t raw = span <= 256 ? byte() : u32();
    return lo + static_cast<int64_t>(raw % span);
  }

  // True with probability about num/den (false when exhausted).
  bool chance(int num, int den) { return byte() % den >= static_cast<unsigned>(den - num); }

  template <class T>
  T pick(std::initializer_list<T> choices) {
    return choices.begin()[range(0, static_cast<int64_t>(choices.size()) - 1)];
  }

  std::size_t consumed() const { return position_; }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

}  // namespace attnkit::fuzz
