// The process's plans, by PlanKey (plan_key.hpp): the hit path of every API call. A plan is made once
// per distinct call shape (validation, backend capability checks, the tuner's choice, kernel params)
// and reused while the tuner's settings stay as they were: configure_tuner(), a rank group or a reset
// bump the plan generation (invalidate_plans), after which every cached plan counts as absent and the
// next call makes a new one. The cache is bounded; when full it starts over (plans are cheap to make
// again next to the calls that filled it).
//
// Hit cost: the key's hash, a shared lock, one bucket compare and a shared_ptr copy.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/plan_key.hpp"

namespace attnkit::detail {

// The plan generation: bumped whenever a cached plan may no longer be what a new plan would be.
uint64_t plan_generation();
void invalidate_plans();

template <class Plan>
class PlanCache {
 public:
  static constexpr size_t kCapacity = 4096;

  std::shared_ptr<const Plan> find(const PlanKey& key) const {
    const uint64_t generation = plan_generation();
    std::shared_lock lock(mutex_);
    const auto it = entries_.find(key.hash());
    if (it == entries_.end()) return nullptr;
    for (const Entry& entry : it->second) {
      if (entry.generation == generation && entry.key == key) return entry.plan;
    }
    return nullptr;
  }

  void insert(const PlanKey& key, std::shared_ptr<const Plan> plan, uint64_t generation) {
    std::unique_lock lock(mutex_);
    if (size_ >= kCapacity) {
      entries_.clear();
      size_ = 0;
    }
    auto& bucket = entries_[key.hash()];
    for (Entry& entry : bucket) {
      if (entry.key == key) {
        entry.plan = std::move(plan);
        entry.generation = generation;
        return;
      }
    }
    bucket.push_back(Entry{key, std::move(plan), generation});
    ++size_;
  }

  void clear() {
    std::unique_lock lock(mutex_);
    entries_.clear();
    size_ = 0;
  }

 private:
  struct Entry {
    PlanKey key;
    std::shared_ptr<const Plan> plan;
    uint64_t generation = 0;
  };
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, std::vector<Entry>> entries_;
  size_t size_ = 0;
};

}  // namespace attnkit::detail
