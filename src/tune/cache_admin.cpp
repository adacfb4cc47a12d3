#include "tune/cache_admin.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "tune/cache_format.hpp"

namespace attnkit::tune {
namespace {

namespace fs = std::filesystem;

bool is_cache_file(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.rfind("tune-", 0) == 0 && name.size() > 10 && name.compare(name.size() - 5, 5, ".json") == 0;
}

bool is_temp_file(const fs::path& path) { return is_cache_file(file_of_temp_file(path)); }

std::vector<fs::path> files_in(const fs::path& dir, bool (*wanted)(const fs::path&)) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && wanted(it->path())) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

CacheFileInfo parse_file(const fs::path& file) {
  CacheFileInfo info;
  info.file = file;
  const FileRead read = read_whole_file(file);
  if (!read.found || !read.error.empty()) {
    info.rejection = "cannot read: " + (read.found ? read.error : std::string("no such file"));
    return info;
  }
  ParsedCache parsed = parse_cache_json_text(read.text);
  info.valid = parsed.contents.has_value();
  info.rejection = parsed.rejection;
  if (parsed.contents) info.contents = std::move(*parsed.contents);
  return info;
}

}  // namespace

std::vector<CacheFileInfo> list_cache_files(const fs::path& dir) {
  std::vector<CacheFileInfo> infos;
  for (const auto& file : files_in(dir, is_cache_file)) infos.push_back(parse_file(file));
  return infos;
}

MergeSummary merge_cache_files(const std::vector<fs::path>& inputs, const fs::path& dir) {
  MergeSummary summary;
  std::vector<fs::path> files;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      const auto found = files_in(input, is_cache_file);
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(input);
    }
  }
  // Fold inputs per device first, so each target file is locked and rewritten once.
  std::map<std::string, CacheContents> by_device;
  for (const auto& file : files) {
    CacheFileInfo info = parse_file(file);
    if (!info.valid) {
      ++summary.files_rejected;
      summary.problems.push_back(file.string() + ": " + info.rejection + "; not merged");
      continue;
    }
    ++summary.files_merged;
    summary.timings += info.contents.timings.size();
    summary.winners += info.contents.winners.size();
    const std::string device = device_key_hash(info.contents.device);
    auto [it, inserted] = by_device.try_emplace(device, CacheContents{info.contents.device, {}, {}});
    merge_cache_contents(it->second, info.contents);
  }
  for (const auto& [hash, contents] : by_device) {
    const fs::path target = cache_file_path(dir, contents.device);
    const std::string error = merge_into_cache_file(target, contents, RepeatedFailures::report_each);
    if (error.empty())
      summary.written.push_back(target);
    else
      summary.problems.push_back(target.string() + ": " + error);
  }
  return summary;
}

size_t clear_cache(const fs::path& dir) {
  size_t removed = 0;
  // Each cache file, and each one a killed writer's temporary file belongs to (it may never have
  // been written), is cleared under its lock: no live writer owns a temporary file then.
  std::set<fs::path> files;
  for (const auto& file : files_in(dir, is_cache_file)) files.insert(file);
  for (const auto& temp : files_in(dir, is_temp_file)) files.insert(file_of_temp_file(temp));
  for (const auto& file : files) {
    const ExclusiveFileLock lock(lock_file_path(file));
    std::error_code ec;
    if (fs::remove(file, ec)) ++removed;
    remove_stale_temp_files(file);
  }
  return removed;
}

}  // namespace attnkit::tune
