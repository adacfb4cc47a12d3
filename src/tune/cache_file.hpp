// The disk side of the cache (DESIGN §6.2): one JSON file per device key, named
// tune-<backend>-<device key hash>.json in the cache folder, with the full key inside.
//
// Writers read-merge-write under an exclusive advisory lock (flock on <file>.lock, which is never
// deleted, since deleting a lock file that someone holds would let a third process lock a new one):
// two processes writing at once both keep their records. The new text goes to a temporary file in
// the same folder that is renamed over the old one, so readers, which take no lock, see either the
// old or the new file, never a torn one.
// A file that does not parse, has another format version, or holds another device key is reported
// (a warning in the log and a line in CacheLoad::problems) and treated as empty; the next write
// replaces it. Nothing here throws on bad files or unwritable folders.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "tune/cache_records.hpp"

namespace attnkit::tune {

std::filesystem::path cache_file_path(const std::filesystem::path& dir, const DeviceKey& key);

struct CacheLoad {
  CacheContents contents;             // empty when the file is missing or was rejected
  bool found = false;                 // the file exists
  std::vector<std::string> problems;  // why the file (or part of it) was ignored
};

// Reads `file`. With `expected`, a file holding another device key is rejected.
CacheLoad read_cache_file(const std::filesystem::path& file, const DeviceKey* expected);

// Merges `additions` into `file` (whose device key must be additions.device) under the lock.
// Returns "" on success, else what failed.
std::string merge_into_cache_file(const std::filesystem::path& file, const CacheContents& additions);

// Writes `text` to a temporary file next to `file` and renames it over `file`. Returns "" or why not.
std::string write_file_atomically(const std::filesystem::path& file, const std::string& text);

// Holds flock(LOCK_EX) on `lock_file` (created when missing) for its lifetime.
class ExclusiveFileLock {
 public:
  explicit ExclusiveFileLock(const std::filesystem::path& lock_file);
  ~ExclusiveFileLock();
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;
  bool locked() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::string error_;
};

}  // namespace attnkit::tune
