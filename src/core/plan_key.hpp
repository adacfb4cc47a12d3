// The identity of a call for the plan cache (plan_cache.hpp): every argument that decides what
// validation says and which kernel runs, as plain 64-bit words, and nothing that changes from call to
// call with the same answer (data pointers, streams, workspaces). A tensor contributes its presence,
// dtype, device, rank, extents, strides and the low four bits of its address: alignment is all that
// validation and the kernels ask of an address (16-byte vector loads at most), so every address of the
// same alignment gets the same plan. Building a key formats no text; its hash is computed once.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::detail {

class PlanKey {
 public:
  // The largest key: the attention backward's 11 views of rank 8 (18 words each) and its scalars.
  static constexpr int kMaxWords = 256;

  void add(int64_t word);
  void add(double value);
  void add(const std::optional<double>& value);
  void add(const TensorView& view);
  void add(const RunOptions& options);

  uint64_t hash() const { return hash_; }
  int32_t size() const { return size_; }
  friend bool operator==(const PlanKey& a, const PlanKey& b) {
    return a.hash_ == b.hash_ && a.size_ == b.size_ &&
           std::memcmp(a.words_.data(), b.words_.data(), sizeof(int64_t) * static_cast<size_t>(a.size_)) == 0;
  }

 private:
  std::array<int64_t, kMaxWords> words_;
  int32_t size_ = 0;
  uint64_t hash_ = 0x9e3779b97f4a7c15ull;
};

// The alignment bits of an address that a plan depends on.
inline int64_t address_alignment_bits(const void* data) {
  return static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(data) & 15u);
}

}  // namespace attnkit::detail
