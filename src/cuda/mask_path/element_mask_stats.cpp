#include "cuda/mask_path/element_mask_stats.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <vector>

#include "cuda/mask_path/element_mask_measure.hpp"

namespace attnkit::cuda::mask_path {
namespace {

struct StatsKey {
  const void* data = nullptr;
  int32_t device = 0;
  int32_t block_m = 0;
  int32_t block_n = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  std::array<int64_t, 4> extents{};
  std::array<int64_t, 4> strides{};
  friend bool operator==(const StatsKey&, const StatsKey&) = default;
};

struct Entry {
  StatsKey key;
  detail::ElementMaskStats stats;
};

// Most recently used first; a linear search over at most kElementMaskStatsCapacity entries costs less
// than hashing the key would at this size.
class StatsCache {
 public:
  std::optional<detail::ElementMaskStats> find(const StatsKey& key) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
    if (it == entries_.end()) return std::nullopt;
    std::rotate(entries_.begin(), it, it + 1);
    return entries_.front().stats;
  }
  void insert(const StatsKey& key, const detail::ElementMaskStats& stats) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(entries_, [&](const Entry& e) { return e.key == key; });
    if (entries_.size() == static_cast<size_t>(kElementMaskStatsCapacity)) entries_.pop_back();
    entries_.insert(entries_.begin(), Entry{key, stats});
  }
  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

StatsCache& cache() {
  static StatsCache instance;
  return instance;
}

std::atomic<int64_t> measurements{0};

StatsKey key_of(const TensorView& mask, int64_t seq_q, int64_t seq_k, int block_m, int block_n) {
  StatsKey key;
  key.data = mask.data;
  key.device = mask.device.index;
  key.block_m = block_m;
  key.block_n = block_n;
  key.seq_q = seq_q;
  key.seq_k = seq_k;
  for (int d = 0; d < 4; ++d) {
    key.extents[static_cast<size_t>(d)] = mask.extents[static_cast<size_t>(d)];
    key.strides[static_cast<size_t>(d)] = mask.strides[static_cast<size_t>(d)];
  }
  return key;
}

}  // namespace

std::optional<detail::ElementMaskStats> element_mask_stats(const TensorView& mask, int64_t seq_q, int64_t seq_k,
                                                           int block_m, int block_n, cudaStream_t stream,
                                                           bool capturing) {
  const StatsKey key = key_of(mask, seq_q, seq_k, block_m, block_n);
  if (std::optional<detail::ElementMaskStats> cached = cache().find(key)) return cached;
  if (capturing) return std::nullopt;
  const detail::ElementMaskStats stats = measure_element_mask(mask, seq_q, seq_k, block_m, block_n, stream);
  measurements.fetch_add(1, std::memory_order_relaxed);
  cache().insert(key, stats);
  return stats;
}

int64_t element_mask_measurements() { return measurements.load(std::memory_order_relaxed); }

void clear_element_mask_stats() { cache().clear(); }

}  // namespace attnkit::cuda::mask_path
