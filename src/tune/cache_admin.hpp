// Cache maintenance behind `attnkit cache show|merge|clear` (DESIGN §6.8). A cache file is
// self-contained (its device key is inside), so shipping a cache is copying its files; merging folds
// files from anywhere — another machine, a CI artifact — into a cache folder, each into the file of
// its own device key, keeping the newest record on a conflict.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "tune/cache_file.hpp"

namespace attnkit::tune {

struct CacheFileInfo {
  std::filesystem::path file;
  bool valid = false;
  std::string rejection;  // when !valid
  CacheContents contents;
};

// Every tune-*.json in `dir`, parsed, sorted by file name. A missing folder has none.
std::vector<CacheFileInfo> list_cache_files(const std::filesystem::path& dir);

struct MergeSummary {
  size_t files_merged = 0;
  size_t files_rejected = 0;
  size_t timings = 0;  // records read from the inputs
  size_t winners = 0;
  std::vector<std::string> problems;           // why inputs were rejected or writes failed
  std::vector<std::filesystem::path> written;  // files of `dir` that were updated
};

// Inputs are cache files or folders of them.
MergeSummary merge_cache_files(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& dir);

// Removes the cache files of `dir` and the temporary files left by killed writers, each under its
// cache file's lock. Lock files stay (see cache_file_io.hpp). Returns the number of cache files removed.
size_t clear_cache(const std::filesystem::path& dir);

}  // namespace attnkit::tune
