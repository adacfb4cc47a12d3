// The launch parameters a GEMM runner keeps between runs (gemm_sm90.cuh). A kernel's Params depend on two
// kinds of run-time values: the operand addresses A, B and C, which only its TMA descriptors embed, and the
// rest — the workspace address (the stream-K scheduler's and split-K's partial sums live there), alpha and
// beta. Encoding the descriptors (cuTensorMapEncodeTiled, four of them) is most of the host time of building
// Params, and pointing an encoded descriptor at another address is a cheap edit (tensor_map_address.hpp). So
// the cache holds one entry per (workspace, alpha, beta), the most recent few of them, each with the operand
// addresses its Params point at: a run with the entry's addresses copies its Params, a run with other addresses
// patches the entry's descriptors to them (and keeps the patched Params for the next run), and only a run with
// a new (workspace, alpha, beta) builds Params from scratch. Callers that allocate per call (PyTorch's caching
// allocator hands out a few addresses in turn) therefore encode once per plan and then only patch.
//
// One lock guards the entries: a run holds it for a compare of a few words and a copy of the Params (a few
// hundred bytes), or for a patch, so a single thread never waits on it and concurrent runs of one plan wait
// at most that long. Pure host code (no CUDA types): Launch is the runner's Params with what it launches them
// with, the build and patch steps are the runner's.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace attnkit::cuda::gemm {

// What an entry's Params are built for besides the operand addresses.
struct GemmParamsKey {
  const void* workspace = nullptr;
  float alpha = 0.0f, beta = 0.0f;
  // Bitwise on alpha and beta: -0.0 and 0.0, or two NaNs, are other Params.
  bool operator==(const GemmParamsKey& o) const {
    return workspace == o.workspace && std::memcmp(&alpha, &o.alpha, sizeof(float)) == 0 &&
           std::memcmp(&beta, &o.beta, sizeof(float)) == 0;
  }
};

// The addresses the descriptors point at (c is null for kernels whose descriptors do not include C).
struct GemmOperandAddresses {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  bool operator==(const GemmOperandAddresses&) const = default;
};

template <class Launch>
class GemmParamsCache {
 public:
  static constexpr int kEntries = 8;

  // The Launch for `key` and `operands`: kept, patched from the key's entry (patch(launch, from, to) points the
  // descriptors at `to`), or built (build() -> Launch, for `key` and `operands`). build and patch may throw;
  // the cache is then as before the call.
  template <class Build, class Patch>
  Launch get(const GemmParamsKey& key, const GemmOperandAddresses& operands, Build&& build, Patch&& patch) const {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      for (Entry& e : entries_) {
        if (!e.used || !(e.key == key)) continue;
        if (!(e.operands == operands)) {
          Launch patched = e.launch;
          patch(patched, e.operands, operands);
          e.launch = patched;
          e.operands = operands;
          ++patches_;
        }
        return e.launch;
      }
    }
    // Built outside the lock (the driver encodes the descriptors here); a concurrent run that builds the same key
    // meanwhile only costs an entry.
    Launch built = build();
    const std::lock_guard<std::mutex> lock(mutex_);
    Entry& slot = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    slot.key = key;
    slot.operands = operands;
    slot.launch = built;
    slot.used = true;
    ++builds_;
    return built;
  }

  // How many Params were built and patched so far (tests and probes).
  int64_t builds() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return builds_;
  }
  int64_t patches() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return patches_;
  }

 private:
  struct Entry {
    GemmParamsKey key;
    GemmOperandAddresses operands;
    Launch launch{};
    bool used = false;
  };

  mutable std::mutex mutex_;
  mutable std::array<Entry, kEntries> entries_{};
  mutable int next_ = 0;
  mutable int64_t builds_ = 0;
  mutable int64_t patches_ = 0;
};

}  // namespace attnkit::cuda::gemm
