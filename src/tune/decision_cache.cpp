#include "tune/decision_cache.hpp"

#include <mutex>

namespace attnkit::tune {

const Config* DecisionCache::find(uint64_t hash, const std::string& text) const {
  std::shared_lock lock(mutex_);
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return nullptr;
  for (const auto& [stored_text, config] : it->second) {
    if (stored_text == text) return config;
  }
  return nullptr;
}

void DecisionCache::insert(uint64_t hash, const std::string& text, const Config* config) {
  std::unique_lock lock(mutex_);
  auto& bucket = entries_[hash];
  for (auto& entry : bucket) {
    if (entry.first == text) {
      entry.second = config;
      return;
    }
  }
  bucket.emplace_back(text, config);
}

size_t DecisionCache::size() const {
  std::shared_lock lock(mutex_);
  size_t count = 0;
  for (const auto& [hash, bucket] : entries_) count += bucket.size();
  return count;
}

void DecisionCache::clear() {
  std::unique_lock lock(mutex_);
  entries_.clear();
}

}  // namespace attnkit::tune
