#include "tune/cache_file.hpp"

#include <map>
#include <mutex>

#include "core/log.hpp"
#include "tune/cache_format.hpp"

namespace attnkit::tune {
namespace {

namespace fs = std::filesystem;
using detail::log_message;
using detail::LogLevel;

// What lies at a cache file's name, as far as one device is concerned.
struct ExistingFile {
  enum class State { missing, ours, foreign, damaged, unreadable };
  State state = State::missing;
  CacheContents contents;  // ours or foreign
  std::string problem;     // foreign, damaged, unreadable: why it is not used
  int format_version = 0;  // ours or foreign
};

// With `device` null every valid file is ours.
ExistingFile inspect(const fs::path& file, const DeviceKey* device) {
  ExistingFile existing;
  FileRead read = read_whole_file(file);
  if (!read.found) return existing;
  if (!read.error.empty()) {
    existing.state = ExistingFile::State::unreadable;
    existing.problem = "cannot read it: " + read.error;
    return existing;
  }
  ParsedCache parsed = parse_cache_json_text(read.text);
  if (!parsed.contents) {
    existing.state = ExistingFile::State::damaged;
    existing.problem = parsed.rejection;
    return existing;
  }
  existing.contents = std::move(*parsed.contents);
  existing.format_version = parsed.format_version;
  if (device == nullptr || existing.contents.device == *device) {
    existing.state = ExistingFile::State::ours;
    return existing;
  }
  existing.state = ExistingFile::State::foreign;
  existing.problem =
      "written for another device or build: " + describe_key_difference(existing.contents.device, *device);
  return existing;
}

void report(CacheLoad& load, const std::string& problem) {
  load.problems.push_back(problem);
  log_message(LogLevel::warning, "tune cache: " + problem);
}

// The failure last returned for each cache file by this process (RepeatedFailures::report_once).
class ReportedFailures {
 public:
  // `error` the first time it follows a success (or nothing) for `file`, else "".
  std::string first_report(const fs::path& file, const std::string& error) {
    std::lock_guard lock(mutex_);
    if (error.empty()) {
      last_.erase(file.string());
      return "";
    }
    std::string& last = last_[file.string()];
    if (last == error) return "";
    last = error;
    return error + " (later writes of this file that fail the same way are not reported until one succeeds)";
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> last_;
};

ReportedFailures& reported_failures() {
  static ReportedFailures failures;
  return failures;
}

// Takes `file`'s lock, folds what is there and `additions` together and writes the result. Another
// device's records found there are first moved into that device's own file (`wait` and
// `may_move_foreign` keep that second merge from waiting forever or moving records further).
std::string merge_records(const fs::path& file, const CacheContents& additions, LockWait wait, bool may_move_foreign) {
  if (!file.parent_path().empty()) {
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (ec) return "cannot create cache folder " + file.parent_path().string() + ": " + ec.message();
  }
  const ExclusiveFileLock lock(lock_file_path(file), wait);
  if (!lock.locked()) return lock.error();
  if (const size_t removed = remove_stale_temp_files(file)) {
    log_message(LogLevel::info, "tune cache: removed " + std::to_string(removed) + " temporary files of " +
                                    file.string() + " left by interrupted writers");
  }
  ExistingFile existing = inspect(file, &additions.device);
  CacheContents merged;
  switch (existing.state) {
    case ExistingFile::State::missing: break;
    case ExistingFile::State::ours: merged = std::move(existing.contents); break;
    case ExistingFile::State::unreadable: return file.string() + ": " + existing.problem + "; not replacing it";
    case ExistingFile::State::damaged:
      log_message(LogLevel::warning,
                  "tune cache: " + file.string() + ": " + existing.problem + "; this write replaces it");
      break;
    case ExistingFile::State::foreign: {
      const fs::path their_file = cache_file_path(file.parent_path(), existing.contents.device);
      const std::string error = may_move_foreign
                                    ? merge_records(their_file, existing.contents, LockWait::up_to_two_seconds, false)
                                    : "it holds yet another device's records";
      if (!error.empty()) {
        return file.string() + " holds another device's records that cannot be moved to " + their_file.string() + " (" +
               error + "); not replacing it";
      }
      log_message(LogLevel::info, "tune cache: moved another device's records from " + file.string() +
                                      " to their own file " + their_file.string());
      break;
    }
  }
  merged.device = additions.device;
  merge_cache_contents(merged, additions);
  return write_file_atomically(file, cache_to_json_text(merged));
}

}  // namespace

fs::path cache_file_path(const fs::path& dir, const DeviceKey& key) {
  return dir / ("tune-" + std::string(backend_name(key.backend)) + "-" + device_key_hash(key) + ".json");
}

CacheLoad read_cache_file(const fs::path& file, const DeviceKey* expected) {
  CacheLoad load;
  ExistingFile existing = inspect(file, expected);
  load.found = existing.state != ExistingFile::State::missing;
  const std::string name = file.string() + ": ";
  switch (existing.state) {
    case ExistingFile::State::missing: break;
    case ExistingFile::State::ours:
      load.contents = std::move(existing.contents);
      if (existing.format_version < kCacheFormatVersion) {
        log_message(LogLevel::info, "tune cache: " + name + "format version " +
                                        std::to_string(existing.format_version) +
                                        " (no checksum), read as it is; the next write stores version " +
                                        std::to_string(kCacheFormatVersion));
      }
      break;
    case ExistingFile::State::unreadable:
      report(load, name + existing.problem + "; ignoring it (writes leave it in place)");
      break;
    case ExistingFile::State::damaged:
      report(load, name + existing.problem + "; ignoring it (the next write replaces it)");
      break;
    case ExistingFile::State::foreign:
      report(load, name + existing.problem + "; not used here (the next write moves its records to " +
                       cache_file_path(file.parent_path(), existing.contents.device).filename().string() + ")");
      break;
  }
  return load;
}

std::string merge_into_cache_file(const fs::path& file, const CacheContents& additions, RepeatedFailures repeats) {
  const std::string error = merge_records(file, additions, LockWait::block, true);
  return repeats == RepeatedFailures::report_each ? error : reported_failures().first_report(file, error);
}

}  // namespace attnkit::tune
