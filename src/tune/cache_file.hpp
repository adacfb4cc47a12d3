// The disk side of the cache (DESIGN §6.2): one JSON file per device key, named
// tune-<backend>-<device key hash>.json in the cache folder, with the full key inside.
//
// Writers read-merge-write under an exclusive lock on <file>.lock and replace the file atomically
// (cache_file_io.hpp): two processes writing at once both keep their records, a writer killed at any
// point loses at most the records it was writing, and the next writer deletes the temporary file it
// left. Readers take no lock and see the old or the new file, never a torn one.
//
// What a reader or a writer finds at the file's name:
//   - nothing: an empty cache, silently;
//   - a file it cannot read (permissions, a folder): reported; writers leave it in place and fail;
//   - a damaged file (not JSON, a wrong checksum, missing fields) or one of a format version this
//     build does not read: reported and ignored; the next write replaces it;
//   - another device's file (copied or mis-shipped): reported and never used; the next write moves
//     its records into that device's own file, then writes this device's.
// A report is a warning in the log and, for readers, a line in CacheLoad::problems. Nothing here
// throws on bad files or unwritable folders.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "tune/cache_file_io.hpp"
#include "tune/cache_records.hpp"

namespace attnkit::tune {

std::filesystem::path cache_file_path(const std::filesystem::path& dir, const DeviceKey& key);

struct CacheLoad {
  CacheContents contents;             // empty when the file is missing or was rejected
  bool found = false;                 // something exists at the file's name
  std::vector<std::string> problems;  // why the file was ignored
};

// Reads `file`. With `expected`, a file holding another device key is rejected.
CacheLoad read_cache_file(const std::filesystem::path& file, const DeviceKey* expected);

enum class RepeatedFailures {
  // A failure that repeats the last one returned for the same file returns "" until a write of that
  // file succeeds: a read-only or full folder costs the tuner one warning, not one per result.
  report_once,
  report_each,  // every failure is returned (cache merge)
};

// Merges `additions` into `file` (whose device key must be additions.device) under the lock.
// Returns "" on success, else what failed.
std::string merge_into_cache_file(const std::filesystem::path& file, const CacheContents& additions,
                                  RepeatedFailures repeats = RepeatedFailures::report_once);

}  // namespace attnkit::tune
