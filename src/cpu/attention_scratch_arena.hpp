// Scratch memory of one CPU attention call (K/V copies, gradient accumulators), carved from one
// block that the calling thread keeps between calls.
//
// Fresh pages cost a fault each on first touch and a TLB shootdown across the worker threads when
// returned: for a 64x64 neighborhood forward that was a quarter of the time on two threads. So
// the block (up to kRetainedScratchBytes) stays with the calling thread for its next call; larger
// blocks are returned at the end of the call. Contents are uninitialised: every use writes
// before it reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cpu {

inline constexpr int64_t kRetainedScratchBytes = int64_t{64} << 20;

class ScratchArena {
 public:
  static constexpr int64_t kAlignment = 64;

  // Bytes an arena needs for buffers of these byte sizes.
  static int64_t bytes_for(std::initializer_list<int64_t> sizes) {
    int64_t total = kAlignment;
    for (int64_t size : sizes) total += (size + kAlignment - 1) / kAlignment * kAlignment;
    return total;
  }

  explicit ScratchArena(int64_t bytes) {
    Retained& retained = retained_block();
    if (retained.capacity >= bytes) {
      block_ = std::move(retained.block);
      capacity_ = retained.capacity;
      retained.capacity = 0;
    } else {
      block_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(bytes));
      capacity_ = bytes;
    }
  }
  ~ScratchArena() {
    Retained& retained = retained_block();
    if (capacity_ <= kRetainedScratchBytes && capacity_ > retained.capacity) {
      retained.block = std::move(block_);
      retained.capacity = capacity_;
    }
  }
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  // `count` uninitialised elements, 64-byte aligned.
  template <class T>
  T* take(int64_t count) {
    const auto base = reinterpret_cast<uintptr_t>(block_.get());
    const int64_t offset =
        static_cast<int64_t>((base + static_cast<uintptr_t>(used_) + kAlignment - 1) / kAlignment * kAlignment - base);
    const int64_t size = count * static_cast<int64_t>(sizeof(T));
    if (offset + size > capacity_) {
      throw Error(Status::internal, "CPU attention scratch arena: a buffer of " + std::to_string(size) +
                                        " bytes does not fit; the arena was sized too small");
    }
    used_ = offset + size;
    return reinterpret_cast<T*>(block_.get() + offset);
  }

 private:
  struct Retained {
    std::unique_ptr<std::byte[]> block;
    int64_t capacity = 0;
  };
  static Retained& retained_block() {
    thread_local Retained retained;
    return retained;
  }

  std::unique_ptr<std::byte[]> block_;
  int64_t capacity_ = 0;
  int64_t used_ = 0;
};

}  // namespace attnkit::cpu
