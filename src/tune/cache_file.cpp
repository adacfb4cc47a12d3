#include "tune/cache_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/log.hpp"
#include "tune/cache_format.hpp"

namespace attnkit::tune {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

std::filesystem::path lock_path(const std::filesystem::path& file) {
  return std::filesystem::path(file.string() + ".lock");
}

void report(CacheLoad& load, const std::string& problem) {
  load.problems.push_back(problem);
  detail::log_message(detail::LogLevel::warning, "tune cache: " + problem);
}

}  // namespace

std::filesystem::path cache_file_path(const std::filesystem::path& dir, const DeviceKey& key) {
  return dir / ("tune-" + std::string(backend_name(key.backend)) + "-" + device_key_hash(key) + ".json");
}

ExclusiveFileLock::ExclusiveFileLock(const std::filesystem::path& lock_file) {
  fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    error_ = errno_text("cannot open lock file " + lock_file.string());
    return;
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    error_ = errno_text("cannot lock " + lock_file.string());
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

ExclusiveFileLock::~ExclusiveFileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

CacheLoad read_cache_file(const std::filesystem::path& file, const DeviceKey* expected) {
  CacheLoad load;
  std::ifstream in(file, std::ios::binary);
  if (!in) return load;
  load.found = true;
  std::ostringstream text;
  text << in.rdbuf();
  ParsedCache parsed = parse_cache_json_text(text.str());
  if (!parsed.contents) {
    report(load, file.string() + ": " + parsed.rejection + "; ignoring it (the next write replaces it)");
    return load;
  }
  if (expected != nullptr && !(parsed.contents->device == *expected)) {
    report(load, file.string() + ": written for another device or build: " +
                     describe_key_difference(parsed.contents->device, *expected) + "; ignoring its records");
    return load;
  }
  load.contents = std::move(*parsed.contents);
  return load;
}

std::string write_file_atomically(const std::filesystem::path& file, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path temp =
      file.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text("cannot create " + temp.string());
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string error = errno_text("cannot write " + temp.string());
      ::close(fd);
      ::unlink(temp.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  // fsync before rename: after a crash the file is the old or the new text, not an empty one.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string error = errno_text("cannot flush " + temp.string());
    ::unlink(temp.c_str());
    return error;
  }
  if (::rename(temp.c_str(), file.c_str()) != 0) {
    std::string error = errno_text("cannot rename " + temp.string() + " to " + file.string());
    ::unlink(temp.c_str());
    return error;
  }
  return "";
}

std::string merge_into_cache_file(const std::filesystem::path& file, const CacheContents& additions) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) return "cannot create cache folder " + file.parent_path().string() + ": " + ec.message();
  const ExclusiveFileLock lock(lock_path(file));
  if (!lock.locked()) return lock.error();
  CacheLoad existing = read_cache_file(file, &additions.device);
  CacheContents merged = std::move(existing.contents);
  merged.device = additions.device;
  merge_cache_contents(merged, additions);
  return write_file_atomically(file, cache_to_json_text(merged));
}

}  // namespace attnkit::tune
