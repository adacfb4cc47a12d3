// The in-memory map from a problem key to its chosen config (DESIGN §6.1): the hit path of every
// tuned call, so it hashes nothing (the key carries its precomputed hash) and takes a shared lock.
// Buckets are keyed by the 64-bit hash; the key text is compared to rule out collisions.
#pragma once
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tune/config_space.hpp"
#include "tune/problem_key.hpp"

namespace attnkit::tune {

class DecisionCache {
 public:
  const Config* find(const ProblemKey& key) const { return find(key.hash, key.text); }
  const Config* find(uint64_t hash, const std::string& text) const;
  // Replaces an existing entry.
  void insert(uint64_t hash, const std::string& text, const Config* config);
  void insert(const ProblemKey& key, const Config* config) { insert(key.hash, key.text, config); }
  size_t size() const;
  void clear();

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint64_t, std::vector<std::pair<std::string, const Config*>>> entries_;
};

}  // namespace attnkit::tune
