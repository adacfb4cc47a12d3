#include "tune/cache_file_io.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace attnkit::tune {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTempInfix = ".tmp.";

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Opens (creating) the lock file for writing, or for reading when this user may not write it.
int open_lock_file(const fs::path& lock_file, std::string& error) {
  const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) return fd;
  const int reason = errno;
  error = errno_text("cannot open lock file " + lock_file.string());
  if (reason != EACCES && reason != EPERM && reason != EROFS) return -1;
  return ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
}

bool lock_exclusively(int fd, LockWait wait) {
  using Clock = std::chrono::steady_clock;
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    if (::flock(fd, wait == LockWait::block ? LOCK_EX : LOCK_EX | LOCK_NB) == 0) return true;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK || Clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool write_all(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    written += static_cast<size_t>(n);
  }
  return true;
}

// Makes a finished rename durable; some file systems cannot sync a folder, which changes nothing for
// readers, so failures are ignored.
void sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

fs::path lock_file_path(const fs::path& file) { return fs::path(file.string() + ".lock"); }

ExclusiveFileLock::ExclusiveFileLock(const fs::path& lock_file, LockWait wait) {
  fd_ = open_lock_file(lock_file, error_);
  if (fd_ < 0) return;
  error_.clear();
  if (lock_exclusively(fd_, wait)) return;
  error_ = errno == EWOULDBLOCK ? "cannot lock " + lock_file.string() + ": another process held it for 2 s"
                                : errno_text("cannot lock " + lock_file.string());
  ::close(fd_);
  fd_ = -1;
}

ExclusiveFileLock::~ExclusiveFileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

FileRead read_whole_file(const fs::path& file) {
  FileRead read;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    read.found = errno != ENOENT && errno != ENOTDIR;
    if (read.found) read.error = std::strerror(errno);
    return read;
  }
  read.found = true;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      read.error = std::strerror(errno);
      read.text.clear();
      break;
    }
    if (n == 0) break;
    read.text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return read;
}

std::string write_file_atomically(const fs::path& file, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const fs::path temp =
      file.string() + kTempInfix + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  // The messages name the cache file, not the temporary one, so that the same failure reads the same
  // every time (cache_file.cpp reports a repeated failure once).
  const std::string next_to = "a temporary file next to " + file.string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text("cannot create " + next_to);
  const auto fail = [&](const std::string& what) {
    std::string error = errno_text(what);
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    return error;
  };
  if (!write_all(fd, text)) return fail("cannot write " + next_to);
  // fsync before rename: after a crash the file is the old or the new text, never an empty one.
  if (::fsync(fd) != 0) return fail("cannot flush " + next_to);
  if (::close(fd) != 0) {
    std::string error = errno_text("cannot flush " + next_to);
    ::unlink(temp.c_str());
    return error;
  }
  if (::rename(temp.c_str(), file.c_str()) != 0) {
    std::string error = errno_text("cannot rename " + next_to + " over it");
    ::unlink(temp.c_str());
    return error;
  }
  sync_folder(file.parent_path());
  return "";
}

fs::path file_of_temp_file(const fs::path& path) {
  const std::string name = path.filename().string();
  const size_t infix = name.rfind(kTempInfix);
  if (infix == std::string::npos || infix == 0) return {};
  return path.parent_path() / name.substr(0, infix);
}

size_t remove_stale_temp_files(const fs::path& file) {
  size_t removed = 0;
  std::error_code ec;
  const fs::path folder = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (file_of_temp_file(it->path()).filename() != file.filename()) continue;
    std::error_code removal;
    removed += fs::remove(it->path(), removal) ? 1 : 0;
  }
  return removed;
}

}  // namespace attnkit::tune
